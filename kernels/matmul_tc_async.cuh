// matmul_tc.cu's step 2, its moves (included by it after step 1): cp.async, ldmatrix, the mma.sync wrappers, the
// swizzled shared tiles and their loaders.

// ---------------------------------------------------------------------------------------------------------------
// Step 2: the Ampere design. Each block's operand slices move global -> shared with cp.async (no registers on the
// way, zero-filled past the edges) into a ring of STAGES slots, so STAGES - 1 slices are in flight during the math;
// warps read their fragments with ldmatrix from XOR-swizzled tiles (no bank conflicts, no padding) and multiply
// with mma.sync: m16n8k16 for float16 / bfloat16, m16n8k8 for TF32.

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {  // bytes < 16: zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {  // all 16 bytes exist
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
// 4 bytes (one float32) at a time, for operands whose lines do not start on 16 bytes (.ca: the 16-byte .cg form only).
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, int bytes) {  // bytes 0: zero-filled
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Four 8 x 8 matrices of 16-bit values (8 rows of 16 bytes each; lane l gives the address of row l % 8 of matrix
// l / 8). Lane l receives, of each matrix, row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1; with .trans the same of
// the transposed matrix.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ float lds_f32(unsigned addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

// One mma.sync of a warp: D (16 x 8, float) += A (16 x K) B (K x 8). With g = lane / 4, t = lane % 4 (PTX ISA):
// 16-bit, K = 16: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..];
//                 b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g].
// TF32, K = 8:    a[0] = A[g][t], a[1] = A[g+8][t], a[2] = A[g][t+4], a[3] = A[g+8][t+4];
//                 b[0] = B[t][g], b[1] = B[t+4][g].
// Both:           d[0], d[1] = D[g][2t, 2t+1], d[2], d[3] = D[g+8][2t, 2t+1].
template <typename T> struct Mma;
template <> struct Mma<half_t> {
    static constexpr int K = 16;
    static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};
template <> struct Mma<bfloat16_t> {
    static constexpr int K = 16;
    static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};
template <> struct Mma<float> {
    static constexpr int K = 8;
    static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
        asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

// One operand's slice in shared memory, laid out as global memory holds it so that cp.async copies 16-byte chunks
// straight across: KC (k contiguous): ROWS lines of BK elements; otherwise BK lines of ROWS elements. A line is
// CHUNKS 16-byte chunks. Chunk c of line l sits at chunk position c ^ f(l), f chosen per reader:
// - ldmatrix reads one chunk position down 8 consecutive lines (from a multiple of 8): f spreads those 8 chunks over
//   the 8 distinct 16-byte bank groups of a 128-byte row of banks (R lines share one such row when CHUNKS < 8);
// - TF32 MN tiles are read by 4-byte loads, 4 lines x 8 consecutive values (2 chunks) per warp: f = 2 (l % 4) puts
//   the 4 lines' chunk pairs on 4 distinct pairs of bank groups.
// Either way a warp's cp.async writes of 8 consecutive chunks of a line (aligned to 8) stay one permutation apart.
template <typename T, int ROWS, int BK, bool KC>
struct SwizzledTile {
    static constexpr int V = 16 / sizeof(T);  // elements per chunk
    static constexpr int LINES = KC ? ROWS : BK, CHUNKS = (KC ? BK : ROWS) / V;
    static constexpr int BYTES = LINES * CHUNKS * 16;
    static constexpr bool SCALAR = sizeof(T) == 4 && !KC;  // read by 4-byte loads (TF32 MN), not ldmatrix
    static constexpr int R = CHUNKS >= 8 ? 1 : 8 / CHUNKS, M = CHUNKS >= 8 ? 8 : CHUNKS;
    static_assert(CHUNKS * V == (KC ? BK : ROWS) && (!SCALAR || CHUNKS >= 8), "whole chunks per line");
    static __device__ __forceinline__ int chunk_at(int line, int chunk) {
        return SCALAR ? chunk ^ ((line & 3) << 1) : chunk ^ ((line / R) % M);
    }
    static __device__ __forceinline__ unsigned offset(int line, int chunk) {
        return (unsigned)(line * CHUNKS + chunk_at(line, chunk)) * 16u;
    }
};

// Moves one operand's slices, global -> shared, with cp.async: each thread copies PER_THREAD chunks a slice, one
// chunk position of lines LINE_STEP apart, so its shared offsets are one offset plus multiples of JUMP (the swizzle
// repeats every 8 lines, 4 for SCALAR tiles) and its global addresses one pointer plus multiples of `step`.
// WHOLE: the caller knows every row of the block and every k of the slice exist; no bounds checks. Otherwise a chunk
// partly past the operand's edge (rows, or depth k) copies only the bytes that exist and zero-fills the rest; one
// wholly past it copies nothing (src-size 0) and reads the base address, which is in bounds. The host guarantees
// 16-byte aligned bases and ld a multiple of V.
template <typename T, int ROWS, int BK, bool KC, int THREADS>
struct AsyncLoader {
    typedef SwizzledTile<T, ROWS, BK, KC> Tile;
    static constexpr int V = Tile::V, LINE_STEP = THREADS / Tile::CHUNKS;
    static constexpr int PER_THREAD = Tile::LINES * Tile::CHUNKS / THREADS;
    static constexpr unsigned JUMP = LINE_STEP * Tile::CHUNKS * 16;
    static_assert(THREADS % Tile::CHUNKS == 0 && PER_THREAD >= 1 && PER_THREAD * LINE_STEP == Tile::LINES,
                  "the threads cover a slice in whole passes");
    static_assert(PER_THREAD == 1 || LINE_STEP % (Tile::SCALAR ? 4 : 8) == 0, "a thread's lines share a swizzle");
    const T* const base;
    const T* src;          // this thread's first chunk in the next slice
    const index_t step;    // elements from one of its chunks to the next (LINE_STEP lines)
    const unsigned soff;   // byte offset of its first chunk in a slot
    const int row_room;    // KC: rows of the operand from this thread's first line on; else from its chunk on
    int k_room;            // KC: depth of the next slice from this chunk's first element on; else from its first line

    __device__ __forceinline__ AsyncLoader(const T* p, index_t ld, int row0, int rows, int k, int tid)
        : base(p),
          src(KC ? p + (index_t)(row0 + tid / Tile::CHUNKS) * ld + tid % Tile::CHUNKS * V
                 : p + (index_t)(tid / Tile::CHUNKS) * ld + row0 + tid % Tile::CHUNKS * V),
          step(LINE_STEP * ld), soff(Tile::offset(tid / Tile::CHUNKS, tid % Tile::CHUNKS)),
          row_room(KC ? rows - row0 - tid / Tile::CHUNKS : rows - row0 - tid % Tile::CHUNKS * V),
          k_room(KC ? k - tid % Tile::CHUNKS * V : k - tid / Tile::CHUNKS) {}

    // Part `part` of `parts` of the next slice into the slot at byte address `slot`: chunks j = part, part + parts, ...
    // The last part also steps on to the following slice.
    template <bool WHOLE>
    __device__ __forceinline__ void load(unsigned slot, int part, int parts) {
        const T* p = src + part * step;
        const int e = KC ? k_room : row_room, elems = e < V ? e : V, lines = KC ? row_room : k_room;
#pragma unroll
        for (int j = part; j < PER_THREAD; j += parts, p += parts * step) {
            if (WHOLE) {
                cp_async16(slot + soff + j * JUMP, p);
            } else {
                const bool any = lines > j * LINE_STEP && elems > 0;
                cp_async16(slot + soff + j * JUMP, any ? p : base, any ? elems * (int)sizeof(T) : 0);
            }
        }
        if (part == parts - 1) {
            src += KC ? (index_t)BK : PER_THREAD * step;  // (not KC: BK = PER_THREAD * LINE_STEP lines)
            k_room -= BK;
        }
    }
};

// AsyncLoader's work for operands whose lines need not start on 16 bytes (any base, any ld; 4-byte T): one element
// per cp.async, the threads laid along the lines so that a warp's copies are consecutive elements (coalesced). Each
// thread keeps one element position of the line and steps over lines LINE_STEP apart; where LINE_STEP is a whole
// number of the swizzle's periods (8 lines, 4 for SCALAR tiles) its shared offsets are one offset plus multiples of
// JUMP, else each is computed.
template <typename T, int ROWS, int BK, bool KC, int THREADS>
struct ElementLoader {
    typedef SwizzledTile<T, ROWS, BK, KC> Tile;
    static constexpr int V = Tile::V, WIDTH = KC ? BK : ROWS, LINE_STEP = THREADS / WIDTH;
    static constexpr int COPIES = Tile::LINES / LINE_STEP;
    static constexpr bool PERIODIC = LINE_STEP % (Tile::SCALAR ? 4 : 8) == 0;
    static constexpr unsigned JUMP = LINE_STEP * Tile::CHUNKS * 16;
    static_assert(sizeof(T) == 4 && THREADS % WIDTH == 0 && COPIES * LINE_STEP == Tile::LINES, "whole passes");
    const T* const base;
    const T* src;          // this thread's element in its first line of the next slice
    const index_t step;    // elements from one of its lines to the next (LINE_STEP lines)
    const int line0, elem;
    const unsigned soff;   // byte offset of its first copy in a slot
    const int row_room;    // KC: rows of the operand from this thread's first line on; else from its element on
    int k_room;            // KC: depth of the next slice from this thread's element on; else from its first line

    __device__ __forceinline__ ElementLoader(const T* p, index_t ld, int row0, int rows, int k, int tid)
        : base(p),
          src(KC ? p + (index_t)(row0 + tid / WIDTH) * ld + tid % WIDTH
                 : p + (index_t)(tid / WIDTH) * ld + row0 + tid % WIDTH),
          step(LINE_STEP * ld), line0(tid / WIDTH), elem(tid % WIDTH),
          soff(Tile::offset(tid / WIDTH, tid % WIDTH / V) + tid % WIDTH % V * 4),
          row_room(KC ? rows - row0 - tid / WIDTH : rows - row0 - tid % WIDTH),
          k_room(KC ? k - tid % WIDTH : k - tid / WIDTH) {}

    template <bool WHOLE>
    __device__ __forceinline__ void load(unsigned slot, int part, int parts) {
        const T* p = src + part * step;
        const bool elem_in = (KC ? k_room : row_room) > 0;
        const int lines = KC ? row_room : k_room;
#pragma unroll
        for (int j = part; j < COPIES; j += parts, p += parts * step) {
            const bool here = WHOLE || (elem_in && lines > j * LINE_STEP);
            const unsigned dst = PERIODIC ? soff + j * JUMP
                                          : Tile::offset(line0 + j * LINE_STEP, elem / V) + elem % V * 4;
            cp_async4(slot + dst, here ? p : base, here ? 4 : 0);
        }
        if (part == parts - 1) {
            src += KC ? (index_t)BK : COPIES * step;  // (not KC: BK = COPIES * LINE_STEP lines)
            k_room -= BK;
        }
    }
};

template <bool ALIGNED, typename T, int ROWS, int BK, bool KC, int THREADS> struct Loader {
    typedef AsyncLoader<T, ROWS, BK, KC, THREADS> type;
};
template <typename T, int ROWS, int BK, bool KC, int THREADS> struct Loader<false, T, ROWS, BK, KC, THREADS> {
    typedef ElementLoader<T, ROWS, BK, KC, THREADS> type;
};

