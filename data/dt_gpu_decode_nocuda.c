/* The loader's GPU decode (dt_gpu_decode.h) in a build without CUDA (CUDA=0; the Makefile
 * links this file instead of dt_gpu_decode.c): dt_gpu_decoder_new refuses with a clear error,
 * so that no other entry is ever reached with a decoder; they fail or do nothing. */
#include "data/dt_gpu_decode.h"

dt_gpu_decoder *dt_gpu_decoder_new(int device, int B, int S, int K, const dt_gpu_decoder *first, dt_err *err) {
    (void)device, (void)B, (void)S, (void)K, (void)first;
    dt_errf(err, "GPU decode: deftc was built without CUDA (make CUDA=1)");
    return NULL;
}
const char *dt_gpu_decoder_describe(const dt_gpu_decoder *d) { (void)d; return ""; }
int dt_gpu_decoder_hardware(const dt_gpu_decoder *d) { (void)d; return 0; }
void dt_gpu_decoder_bind_thread(const dt_gpu_decoder *d) { (void)d; }
int dt_gpu_decoder_decode(dt_gpu_decoder *d, int k, const dt_gpu_decode_job *jobs, const int *rows, int n,
                          int *refused, dt_gpu_decode_times *times, dt_err *err) {
    (void)d, (void)k, (void)jobs, (void)rows, (void)n, (void)refused, (void)times;
    return dt_errf(err, "GPU decode: deftc was built without CUDA");
}
int dt_gpu_decoder_finish(dt_gpu_decoder *d, int k, const uint8_t *host_images, const int *rows, int n, dt_err *err) {
    (void)d, (void)k, (void)host_images, (void)rows, (void)n;
    return dt_errf(err, "GPU decode: deftc was built without CUDA");
}
int dt_gpu_decoder_supported(const dt_gpu_decoder *d, const uint8_t *jpeg, size_t bytes, dt_gpu_parse **parse) {
    (void)d, (void)jpeg, (void)bytes, (void)parse;
    return 0;
}
void dt_gpu_decoder_parse_free(const dt_gpu_decoder *d, dt_gpu_parse *parse) { (void)d, (void)parse; }
const uint8_t *dt_gpu_decoder_images(const dt_gpu_decoder *d, int k) { (void)d, (void)k; return NULL; }
void dt_gpu_decoder_released(dt_gpu_decoder *d, int k) { (void)d, (void)k; }
void dt_gpu_decoder_acquire(const dt_gpu_decoder *d, int k) { (void)d, (void)k; }
int dt_gpu_decoder_sync(dt_gpu_decoder *d, dt_err *err) {
    (void)d;
    return dt_errf(err, "GPU decode: deftc was built without CUDA");
}
void dt_gpu_decoder_free(dt_gpu_decoder *d) { (void)d; }
