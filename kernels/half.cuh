// 16-bit floats without the CUDA headers: NVRTC in a pip-only CuPy install has no cuda_fp16.h or mma.h, so the
// storage types are 16 raw bits and the conversions are PTX (or integer arithmetic where PTX has none).
#pragma once

#include "common.cuh"

struct __align__(2) half_t { unsigned short bits; };
struct __align__(2) bfloat16_t { unsigned short bits; };

// The type products of T are summed in: float for the 16-bit types and float, double for double.
template <typename T> struct Accum { typedef T type; };
template <> struct Accum<half_t> { typedef float type; };
template <> struct Accum<bfloat16_t> { typedef float type; };

template <> struct Vec16<half_t> { typedef uint4 type; static const int n = 8; };
template <> struct Vec16<bfloat16_t> { typedef uint4 type; static const int n = 8; };

__device__ __forceinline__ float to_float(half_t x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}

__device__ __forceinline__ float to_float(bfloat16_t x) { return __uint_as_float((unsigned)x.bits << 16); }
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ double to_float(double x) { return x; }  // (the accumulator type of double is double)

// Round a sum to T, to nearest even: from_float<half_t>(s).
template <typename T> __device__ __forceinline__ T from_float(typename Accum<T>::type x) { return x; }

template <> __device__ __forceinline__ half_t from_float<half_t>(float x) {
    half_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
    return h;
}

template <> __device__ __forceinline__ bfloat16_t from_float<bfloat16_t>(float x) {
    bfloat16_t h;
#if __CUDA_ARCH__ >= 800
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(x));
#else  // no bf16 conversion before Ampere: round the top 16 bits to nearest even, NaN kept quiet
    const unsigned u = __float_as_uint(x);
    h.bits = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u)
                                              : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
    return h;
}

// Two adjacent 16-bit values (a 32-bit word: the low half is the first) as floats.
template <typename T> __device__ __forceinline__ float2 pair_to_float2(unsigned word) {
    T lo, hi;
    lo.bits = (unsigned short)(word & 0xffffu);
    hi.bits = (unsigned short)(word >> 16);
    return make_float2(to_float(lo), to_float(hi));
}

// The Vec16<T>::n elements of a 16-byte vector as accumulator values: float and double as they are, 16-bit values
// converted two per 32-bit word.
template <typename T, typename V> struct Unpack {
    static __device__ __forceinline__ void to(const V& v, typename Accum<T>::type* f) {
        const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
        for (int w = 0; w < Vec16<T>::n; ++w) f[w] = e[w];
    }
};
template <typename T> struct Unpack<T, uint4> {  // eight 16-bit values
    static __device__ __forceinline__ void to(const uint4& v, float* f) {
        const float2 p0 = pair_to_float2<T>(v.x), p1 = pair_to_float2<T>(v.y);
        const float2 p2 = pair_to_float2<T>(v.z), p3 = pair_to_float2<T>(v.w);
        f[0] = p0.x; f[1] = p0.y; f[2] = p1.x; f[3] = p1.y; f[4] = p2.x; f[5] = p2.y; f[6] = p3.x; f[7] = p3.y;
    }
};
