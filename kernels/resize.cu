// Bilinear resize and the detector letterbox, read top to bottom as the lesson: the helpers every step shares, then
// the naive kernels (one thread per output value, a launch per step), the fused ones (every step in one thread),
// then the fast ones (runs of output pixels per thread, taps once per block, vector loads and stores, the batch on
// the grid), and last the box mapping that undoes the letterbox.
#include "common.cuh"

// ---- Element types. float16 travels as its bits, converted by the PTX instructions themselves, so the file needs
// no cuda_fp16.h (NVRTC compiles it with no include path to the CUDA headers).
struct half_bits { unsigned short bits; };

__device__ __forceinline__ float to_float(unsigned char v) { return (float)v; }
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(half_bits v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ half_bits from_float<half_bits>(float v) {
    half_bits h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(v));
    return h;
}
// uint8 rounds half up, as OpenCV's fixed-point bilinear does; a weighted mean of bytes never leaves [0, 255].
template <> __device__ __forceinline__ unsigned char from_float<unsigned char>(float v) {
    return (unsigned char)(int)fminf(v + 0.5f, 255.0f);
}

template <int BYTES> struct Bits;  // an unsigned type of BYTES bytes: what a vector load or store moves
template <> struct Bits<1> { typedef unsigned char type; };
template <> struct Bits<2> { typedef unsigned short type; };
template <> struct Bits<4> { typedef unsigned int type; };
template <> struct Bits<8> { typedef uint2 type; };
template <> struct Bits<16> { typedef uint4 type; };

// ---- Coordinates. Pixel centres sit at half-integers (OpenCV INTER_LINEAR, PyTorch align_corners=False):
// src = (dst + 0.5) * inv_scale - 0.5, in float64 with the host's float64 scale (a float32 scale puts some pixels
// one source index away), and without FMA contraction, so the index is the float64 reference's bit for bit.
// Left of the first centre reads the first pixel alone, right of the last centre the last pixel alone.
struct Tap { int i0, i1; float w; };  // value = v[i0] + w * (v[i1] - v[i0]); i0 < 0 marks padding (letterbox)

__device__ __forceinline__ Tap source_tap(int dst, double inv_scale, int in_size) {
    const double s = fmax(__dadd_rn(__dmul_rn((double)dst + 0.5, inv_scale), -0.5), 0.0);
    const int i0 = (int)s;  // floor: s >= 0
    Tap t;
    if (i0 >= in_size - 1) {
        t.i0 = t.i1 = in_size - 1;
        t.w = 0.0f;
    } else {
        t.i0 = i0;
        t.i1 = i0 + 1;
        t.w = (float)(s - (double)i0);  // exact in float64, rounded once
    }
    return t;
}

__device__ __forceinline__ float lerp(float a, float b, float w) { return fmaf(w, b - a, a); }

// ---- Letterbox geometry of one image: the resized (nh, nw) sits at (top, left) of the output; inv_y = h / nh and
// inv_x = w / nw come from the host in float64. TABLE: image n's row of a table of TABLE_COLS int64 (a list of
// differently sized images); otherwise the kernel arguments, image n being n * h * w * 3 bytes into the batch.
constexpr int TABLE_COLS = 9;  // pointer, h, w, nh, nw, top, left, bits of inv_y, bits of inv_x
struct Geometry {
    const unsigned char* src;
    int h, w, nh, nw, top, left;
    double inv_y, inv_x;
};

template <bool TABLE>
__device__ __forceinline__ Geometry geometry(const void* src, index_t n, int2 hw, int2 nhw, int2 topleft,
                                             double inv_y, double inv_x) {
    Geometry g;
    if (TABLE) {
        const long long* row = reinterpret_cast<const long long*>(src) + n * TABLE_COLS;
        g.src = reinterpret_cast<const unsigned char*>(row[0]);
        g.h = (int)row[1], g.w = (int)row[2], g.nh = (int)row[3], g.nw = (int)row[4];
        g.top = (int)row[5], g.left = (int)row[6];
        g.inv_y = __longlong_as_double(row[7]), g.inv_x = __longlong_as_double(row[8]);
    } else {
        g.h = hw.x, g.w = hw.y, g.nh = nhw.x, g.nw = nhw.y, g.top = topleft.x, g.left = topleft.y;
        g.inv_y = inv_y, g.inv_x = inv_x;
        g.src = reinterpret_cast<const unsigned char*>(src) + n * g.h * g.w * 3;
    }
    return g;
}

// The boxes map of one image, (3, 2) float64: the scale (nh / h, nw / w), the offset (top, left), the size (h, w).
__device__ __forceinline__ void write_boxes_map(double* m, const Geometry& g) {
    m[0] = (double)g.nh / g.h, m[1] = (double)g.nw / g.w;
    m[2] = g.top, m[3] = g.left, m[4] = g.h, m[5] = g.w;
}

// The output channel c's pad byte; the normalisation out = v * alpha + beta per output channel, (alpha, beta) in
// one float2 each (kernel parameters are 8-byte slots). c is a constant wherever the loops over channels unroll.
__device__ __forceinline__ float pad_value(unsigned int pad, int c) { return (float)((pad >> (8 * c)) & 255u); }
__device__ __forceinline__ float normalise(float v, int c, float2 ab0, float2 ab1, float2 ab2) {
    const float2 ab = c == 0 ? ab0 : c == 1 ? ab1 : ab2;
    return fmaf(v, ab.x, ab.y);
}

// ---------------------------------------------------------------------------------------------------------------
// Step 1, naive. One thread per output value: each finds its own taps and reads its own four source values, so the
// C threads of one pixel repeat the coordinate work. TI -> TO: uint8 -> float for the letterbox's first pass.
template <typename TI, typename TO>
__global__ void resize_naive(TO* __restrict__ out, const TI* __restrict__ in, index_t total, int h, int w, int oh,
                             int ow, int c, double inv_y, double inv_x) {
    for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < total; i += (index_t)gridDim.x * blockDim.x) {
        const int ch = (int)(i % c);
        index_t q = i / c;
        const int x = (int)(q % ow);
        q /= ow;
        const int y = (int)(q % oh);
        const TI* img = in + q / oh * h * w * c;
        const Tap ty = source_tap(y, inv_y, h), tx = source_tap(x, inv_x, w);
        const TI* r0 = img + (index_t)ty.i0 * w * c + ch;
        const TI* r1 = img + (index_t)ty.i1 * w * c + ch;
        const float top = lerp(to_float(r0[(index_t)tx.i0 * c]), to_float(r0[(index_t)tx.i1 * c]), tx.w);
        const float bottom = lerp(to_float(r1[(index_t)tx.i0 * c]), to_float(r1[(index_t)tx.i1 * c]), tx.w);
        out[i] = from_float<TO>(lerp(top, bottom, ty.w));
    }
}

// The naive letterbox's later passes over (n, y, x, channel) float32 canvases, one thread per value each.
// Pass 2: the padded canvas; `pad` is in the canvas's (source) channel order here. It also writes the boxes map.
__global__ void letterbox_pad_naive(float* __restrict__ canvas, const float* __restrict__ resized,
                                    double* __restrict__ boxes_map, index_t total, int2 hw, int2 nhw, int2 topleft,
                                    int2 out_hw, unsigned int pad) {
    for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < total; i += (index_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % 3);
        index_t q = i / 3;
        const int x = (int)(q % out_hw.y);
        q /= out_hw.y;
        const int y = (int)(q % out_hw.x);
        const index_t n = q / out_hw.x;
        const Geometry g = geometry<false>(nullptr, n, hw, nhw, topleft, 0.0, 0.0);  // (g.src unused)
        if (i % ((index_t)out_hw.x * out_hw.y * 3) == 0) write_boxes_map(boxes_map + n * 6, g);
        const int yr = y - g.top, xr = x - g.left;
        canvas[i] = yr >= 0 && yr < g.nh && xr >= 0 && xr < g.nw ? resized[((n * g.nh + yr) * g.nw + xr) * 3 + c]
                                                                : pad_value(pad, c);
    }
}

// Pass 3: channel swap and normalisation, cast to the output type (still pixel by pixel, NHWC).
template <typename TO>
__global__ void letterbox_normalise_naive(TO* __restrict__ out, const float* __restrict__ canvas, index_t total,
                                          float2 ab0, float2 ab1, float2 ab2, int swap) {
    for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < total; i += (index_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % 3);
        out[i] = from_float<TO>(normalise(canvas[i - c + (swap ? 2 - c : c)], c, ab0, ab1, ab2));
    }
}

// Pass 4 (NCHW only): (n, plane, 3) -> (n, 3, plane), one thread per output value.
template <typename T>
__global__ void hwc_to_chw_naive(T* __restrict__ out, const T* __restrict__ in, index_t total, index_t plane) {
    for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < total; i += (index_t)gridDim.x * blockDim.x) {
        const index_t p = i % plane, q = i / plane;
        out[i] = in[(q / 3 * plane + p) * 3 + q % 3];
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Step 2, fused. Resize: one thread per output pixel, its taps found once for all C channels. Letterbox: one thread
// per output value doing every step (padding, taps, channel swap, normalisation, layout, cast): one launch.
template <typename T>
__global__ void resize_fused(T* __restrict__ out, const T* __restrict__ in, index_t pixels, int h, int w, int oh,
                             int ow, int c, double inv_y, double inv_x) {
    for (index_t p = blockIdx.x * (index_t)blockDim.x + threadIdx.x; p < pixels; p += (index_t)gridDim.x * blockDim.x) {
        const int x = (int)(p % ow);
        const index_t q = p / ow;
        const int y = (int)(q % oh);
        const T* img = in + q / oh * h * w * c;
        const Tap ty = source_tap(y, inv_y, h), tx = source_tap(x, inv_x, w);
        const T* r0 = img + (index_t)ty.i0 * w * c;
        const T* r1 = img + (index_t)ty.i1 * w * c;
        const index_t x0 = (index_t)tx.i0 * c, x1 = (index_t)tx.i1 * c;
        for (int ch = 0; ch < c; ++ch) {
            const float top = lerp(to_float(r0[x0 + ch]), to_float(r0[x1 + ch]), tx.w);
            const float bottom = lerp(to_float(r1[x0 + ch]), to_float(r1[x1 + ch]), tx.w);
            out[p * c + ch] = from_float<T>(lerp(top, bottom, ty.w));
        }
    }
}

template <typename TO, bool NCHW, bool TABLE>
__global__ void letterbox_fused(TO* __restrict__ out, const void* __restrict__ src, double* __restrict__ boxes_map,
                                index_t total, int2 hw, int2 nhw, int2 topleft, int2 out_hw, double inv_y,
                                double inv_x, float2 ab0, float2 ab1, float2 ab2, unsigned int pad, int swap) {
    const int oh = out_hw.x, ow = out_hw.y;
    for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < total; i += (index_t)gridDim.x * blockDim.x) {
        int c, y, x;
        index_t q;
        if (NCHW) {
            x = (int)(i % ow), q = i / ow, y = (int)(q % oh), q /= oh, c = (int)(q % 3), q /= 3;
        } else {
            c = (int)(i % 3), q = i / 3, x = (int)(q % ow), q /= ow, y = (int)(q % oh), q /= oh;
        }
        const Geometry g = geometry<TABLE>(src, q, hw, nhw, topleft, inv_y, inv_x);
        if ((c | y | x) == 0) write_boxes_map(boxes_map + q * 6, g);
        const int yr = y - g.top, xr = x - g.left;
        float v = pad_value(pad, c);
        if (yr >= 0 && yr < g.nh && xr >= 0 && xr < g.nw) {
            const Tap ty = source_tap(yr, g.inv_y, g.h), tx = source_tap(xr, g.inv_x, g.w);
            const unsigned char* r0 = g.src + (index_t)ty.i0 * g.w * 3 + (swap ? 2 - c : c);
            const unsigned char* r1 = g.src + (index_t)ty.i1 * g.w * 3 + (swap ? 2 - c : c);
            const index_t x0 = 3 * (index_t)tx.i0, x1 = 3 * (index_t)tx.i1;
            v = lerp(lerp(r0[x0], r0[x1], tx.w), lerp(r1[x0], r1[x1], tx.w), ty.w);
        }
        out[i] = from_float<TO>(normalise(v, c, ab0, ab1, ab2));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Step 3, fast. A block of 32 x 8 threads covers a 128 x 16 tile of output pixels of one image (blockIdx.z; the
// batch is on the grid): each thread RUN consecutive pixels of ROWS rows. The tile's taps are found once per block
// into shared memory (not once per value); each thread's run leaves in whole vector stores (VEC: the host checked
// that every full run is aligned), and pixels whose bytes make a 2-, 4-, 8- or 16-byte word load as one.
constexpr int FAST_X = 32, FAST_Y = 8, RUN = 4, ROWS = 2;
constexpr int TILE_W = FAST_X * RUN, TILE_H = FAST_Y * ROWS;
constexpr int FAST_MIN_BLOCKS = 4;  // registers for 4 blocks (1024 threads) per SM: enough loads in flight

__host__ __device__ constexpr int store_unit(int bytes) {  // the widest word that divides a run of `bytes`
    return bytes % 16 == 0 ? 16 : bytes % 8 == 0 ? 8 : bytes % 4 == 0 ? 4 : bytes % 2 == 0 ? 2 : 1;
}
__host__ __device__ constexpr bool is_word(int bytes) { return bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16; }

template <typename T, int N, bool VEC>
__device__ __forceinline__ void store_run(T* dst, const T (&v)[N], int valid) {
    if constexpr (VEC) {
        constexpr int B = N * (int)sizeof(T), U = store_unit(B);
        if (valid == N) {
            union { T e[N]; typename Bits<U>::type u[B / U]; } run;
#pragma unroll
            for (int i = 0; i < N; ++i) run.e[i] = v[i];
#pragma unroll
            for (int j = 0; j < B / U; ++j) reinterpret_cast<typename Bits<U>::type*>(dst)[j] = run.u[j];
            return;
        }
    }
#pragma unroll
    for (int i = 0; i < N; ++i)
        if (i < valid) dst[i] = v[i];
}

// The two horizontal taps (pixels i0 and i1) of one source row, C channels each, as floats.
template <typename T, int C, bool VEC>
struct PixelPair {
    __device__ static __forceinline__ void load(const T* row, const Tap& t, const T*, const T*, float (&a)[C],
                                                float (&b)[C]) {
        load_pixel(row + (index_t)t.i0 * C, a);
        load_pixel(row + (index_t)t.i1 * C, b);
    }
    __device__ static __forceinline__ void load_pixel(const T* p, float (&v)[C]) {
        constexpr int B = C * (int)sizeof(T);
        if constexpr (VEC && is_word(B)) {  // the host checked the input's alignment to B
            union { typename Bits<B>::type raw; T e[C]; } u;
            u.raw = *reinterpret_cast<const typename Bits<B>::type*>(p);
#pragma unroll
            for (int c = 0; c < C; ++c) v[c] = to_float(u.e[c]);
        } else {
#pragma unroll
            for (int c = 0; c < C; ++c) v[c] = to_float(p[c]);
        }
    }
};

// 3-channel uint8 (the camera frame): the 6 bytes of two neighbouring pixels come from at most two aligned 8-byte
// loads instead of six byte loads; where those words would cross the image's first or last byte, byte by byte.
template <bool VEC>
struct PixelPair<unsigned char, 3, VEC> {
    __device__ static __forceinline__ void load(const unsigned char* row, const Tap& t, const unsigned char* begin,
                                                const unsigned char* end, float (&a)[3], float (&b)[3]) {
        const unsigned char* p = row + 3 * (index_t)t.i0;
        const int s = (int)((unsigned long long)p & 7);
        const unsigned char* word = p - s;
        if (t.i1 == t.i0 + 1 && word >= begin && word + 16 <= end) {
            const unsigned long long lo = *reinterpret_cast<const unsigned long long*>(word);
            const unsigned long long hi = s > 2 ? *reinterpret_cast<const unsigned long long*>(word + 8) : 0ull;
            const unsigned long long v = s ? lo >> (8 * s) | hi << (64 - 8 * s) : lo;
#pragma unroll
            for (int c = 0; c < 3; ++c) {
                a[c] = (float)((v >> (8 * c)) & 255u);
                b[c] = (float)((v >> (8 * c + 24)) & 255u);
            }
        } else {
            const unsigned char* q = row + 3 * (index_t)t.i1;
#pragma unroll
            for (int c = 0; c < 3; ++c) a[c] = p[c], b[c] = q[c];
        }
    }
};

// Both horizontal taps of both source rows, blended: the bilinear value of every channel.
template <typename T, int C, bool VEC>
__device__ __forceinline__ void bilinear(const T* r0, const T* r1, const Tap& tx, float wy, const T* begin,
                                         const T* end, float (&v)[C]) {
    float a0[C], b0[C], a1[C], b1[C];
    PixelPair<T, C, VEC>::load(r0, tx, begin, end, a0, b0);
    PixelPair<T, C, VEC>::load(r1, tx, begin, end, a1, b1);
#pragma unroll
    for (int c = 0; c < C; ++c) v[c] = lerp(lerp(a0[c], b0[c], tx.w), lerp(a1[c], b1[c], tx.w), wy);
}

template <typename T, int C, bool VEC>
__global__ void __launch_bounds__(FAST_X * FAST_Y, FAST_MIN_BLOCKS)
resize_fast(T* __restrict__ out, const T* __restrict__ in, int h, int w, int oh, int ow, double inv_y, double inv_x) {
    __shared__ Tap xtap[TILE_W], ytap[TILE_H];
    const int x0 = blockIdx.x * TILE_W, y0 = blockIdx.y * TILE_H, t = threadIdx.y * FAST_X + threadIdx.x;
    if (t < TILE_W) xtap[t] = source_tap(min(x0 + t, ow - 1), inv_x, w);
    else if (t < TILE_W + TILE_H) ytap[t - TILE_W] = source_tap(min(y0 + t - TILE_W, oh - 1), inv_y, h);
    __syncthreads();  // the tables are read by every thread
    const int xl = threadIdx.x * RUN, x = x0 + xl;
    if (x >= ow) return;
    const T* img = in + blockIdx.z * (index_t)h * w * C;
    const T* img_end = img + (index_t)h * w * C;
    Tap tx[RUN];
#pragma unroll
    for (int k = 0; k < RUN; ++k) tx[k] = xtap[xl + k];
#pragma unroll 1
    for (int r = 0; r < ROWS; ++r) {  // (not unrolled: a row's 16 loads in flight are plenty, and fit the registers)
        const int yl = threadIdx.y + r * FAST_Y, y = y0 + yl;
        if (y >= oh) break;
        const Tap ty = ytap[yl];
        const T* r0 = img + (index_t)ty.i0 * w * C;
        const T* r1 = img + (index_t)ty.i1 * w * C;
        T run[RUN * C];
#pragma unroll
        for (int k = 0; k < RUN; ++k) {
            float v[C];
            bilinear<T, C, VEC>(r0, r1, tx[k], ty.w, img, img_end, v);
#pragma unroll
            for (int c = 0; c < C; ++c) run[k * C + c] = from_float<T>(v[c]);
        }
        store_run<T, RUN * C, VEC>(out + ((blockIdx.z * (index_t)oh + y) * ow + x) * C, run, min(RUN, ow - x) * C);
    }
}

// Letterbox taps: an output position outside the resized image is padding (i0 = -1).
__device__ __forceinline__ Tap letterbox_tap(int resized_pos, int resized_size, double inv_scale, int in_size) {
    if (resized_pos < 0 || resized_pos >= resized_size) return Tap{-1, -1, 0.0f};
    return source_tap(resized_pos, inv_scale, in_size);
}

template <typename TO, bool NCHW, bool TABLE, bool VEC>
__global__ void __launch_bounds__(FAST_X * FAST_Y, FAST_MIN_BLOCKS)
letterbox_fast(TO* __restrict__ out, const void* __restrict__ src, double* __restrict__ boxes_map, int2 hw, int2 nhw,
               int2 topleft, int2 out_hw, double inv_y, double inv_x, float2 ab0, float2 ab1, float2 ab2,
               unsigned int pad, int swap) {
    __shared__ Tap xtap[TILE_W], ytap[TILE_H];
    const index_t n = blockIdx.z;
    const Geometry g = geometry<TABLE>(src, n, hw, nhw, topleft, inv_y, inv_x);
    const int oh = out_hw.x, ow = out_hw.y;
    const int x0 = blockIdx.x * TILE_W, y0 = blockIdx.y * TILE_H, t = threadIdx.y * FAST_X + threadIdx.x;
    if (t < TILE_W) xtap[t] = letterbox_tap(x0 + t - g.left, g.nw, g.inv_x, g.w);
    else if (t < TILE_W + TILE_H) ytap[t - TILE_W] = letterbox_tap(y0 + t - TILE_W - g.top, g.nh, g.inv_y, g.h);
    else if (t == TILE_W + TILE_H && (blockIdx.x | blockIdx.y) == 0 && boxes_map != nullptr)  // null: kept by the host
        write_boxes_map(boxes_map + n * 6, g);
    __syncthreads();  // the tables are read by every thread
    const int xl = threadIdx.x * RUN, x = x0 + xl;
    if (x >= ow) return;
    const int valid = min(RUN, ow - x);
    const unsigned char* end = g.src + (index_t)g.h * g.w * 3;
    Tap tx[RUN];
#pragma unroll
    for (int k = 0; k < RUN; ++k) tx[k] = xtap[xl + k];
#pragma unroll 1
    for (int r = 0; r < ROWS; ++r) {  // (not unrolled: a row's 16 loads in flight are plenty, and fit the registers)
        const int yl = threadIdx.y + r * FAST_Y, y = y0 + yl;
        if (y >= oh) break;
        const Tap ty = ytap[yl];
        const unsigned char* r0 = g.src + (index_t)max(ty.i0, 0) * g.w * 3;  // (a padding row reads nothing)
        const unsigned char* r1 = g.src + (index_t)max(ty.i1, 0) * g.w * 3;
        TO v[3][RUN];  // [output channel][pixel]
#pragma unroll
        for (int k = 0; k < RUN; ++k) {
            float s[3] = {pad_value(pad, 0), pad_value(pad, 1), pad_value(pad, 2)};
            if (ty.i0 >= 0 && tx[k].i0 >= 0) {
                float p[3];
                bilinear<unsigned char, 3, VEC>(r0, r1, tx[k], ty.w, g.src, end, p);
#pragma unroll
                for (int c = 0; c < 3; ++c) s[c] = swap ? p[2 - c] : p[c];
            }
#pragma unroll
            for (int c = 0; c < 3; ++c) v[c][k] = from_float<TO>(normalise(s[c], c, ab0, ab1, ab2));
        }
        if (NCHW) {
#pragma unroll
            for (int c = 0; c < 3; ++c)
                store_run<TO, RUN, VEC>(out + ((n * 3 + c) * oh + y) * (index_t)ow + x, v[c], valid);
        } else {
            TO run[3 * RUN];
#pragma unroll
            for (int k = 0; k < RUN; ++k)
#pragma unroll
                for (int c = 0; c < 3; ++c) run[3 * k + c] = v[c][k];
            store_run<TO, 3 * RUN, VEC>(out + ((n * oh + y) * (index_t)ow + x) * 3, run, 3 * valid);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The postprocessing half: boxes (x1, y1, x2, y2) in letterboxed pixels back to the original image's pixels, one
// thread per coordinate; box b belongs to image b / per_image, whose boxes map (write_boxes_map) is 6 doubles at
// boxes_map + 6 * image. clip: into [0, w] x [0, h].
template <typename T>
__global__ void unletterbox_boxes(T* __restrict__ out, const T* __restrict__ boxes,
                                  const double* __restrict__ boxes_map, index_t total, index_t per_image, int clip) {
    for (index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; i < total; i += (index_t)gridDim.x * blockDim.x) {
        const double* m = boxes_map + i / 4 / per_image * 6;
        const int axis = 1 - (int)(i & 1);  // x1 and x2 take the maps' x entries (1), y1 and y2 their y entries (0)
        double v = ((double)boxes[i] - m[2 + axis]) / m[axis];
        if (clip) v = fmin(fmax(v, 0.0), m[4 + axis]);
        out[i] = (T)v;
    }
}
