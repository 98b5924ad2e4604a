// Deferred small writes (runtime/upload.rs, POLYCL_WRITE=batch): a decode
// step's inputs (token, position, mask, cache row indices) travel as this
// kernel's by-value argument, so the host pays one launch for all of them
// instead of one transfer each (docs/perf.md step 43).
//
// `b.w`: the count n, then n descriptors of three words (destination slot
// << 24 | length in bytes, byte offset low, high), then each write's bytes
// in order, each padded to 4. The host keeps writes of one batch from
// overlapping, so their order within the launch does not matter.
// 240 words plus four buffer arguments stay within the 1024 bytes of
// arguments that every OpenCL device accepts.
#define UPLOAD_WORDS 240
typedef struct {
    uint w[UPLOAD_WORDS];
} upload_batch;

// global {64}, local {64}.
kernel void kernel_upload_scatter(global uchar *m0, global uchar *m1, global uchar *m2,
                                  global uchar *m3, upload_batch b) {
    const uint n = b.w[0];
    uint at = 4 * (1 + 3 * n);
    const uchar *bytes = (const uchar *)b.w;
    for (uint i = 0; i < n; ++i) {
        const uint d = b.w[1 + 3 * i];
        const uint slot = d >> 24, len = d & 0xFFFFFFu;
        const ulong off = (ulong)b.w[2 + 3 * i] | ((ulong)b.w[3 + 3 * i] << 32);
        global uchar *dst = (slot == 0 ? m0 : slot == 1 ? m1 : slot == 2 ? m2 : m3) + off;
        for (uint j = get_local_id(0); j < len; j += get_local_size(0)) dst[j] = bytes[at + j];
        at += (len + 3) & ~3u;
    }
}
