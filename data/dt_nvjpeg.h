/* dt_nvjpeg.h: NVIDIA's nvJPEG, loaded at run time (dlopen), for the loader's GPU decode
 * (dt_gpu_decode.h).
 *
 * Why at run time: nvJPEG ships with the CUDA toolkit as libnvjpeg.so.<major>, but not with
 * every toolkit install, and its header is not always there either (this project's CI machine
 * has neither). deftc declares the part of nvJPEG's C API it calls itself - the library's ABI,
 * stable since nvJPEG 10: handles, the batched decoder, the stream parser - so it builds
 * everywhere, and a program that never decodes on the GPU never needs the library. When it is
 * missing, decode=auto decodes on the CPU and decode=gpu is an error naming what was tried.
 *
 * Where it looks, in order: $DT_NVJPEG_LIB (a path), libnvjpeg.so.13, .12, .11 (the dynamic
 * loader's search: LD_LIBRARY_PATH, the program's run path - /usr/local/cuda/lib64 for deftc's
 * programs - and ldconfig's cache), then $CUDA_HOME/lib64 and /usr/local/cuda/lib64. The
 * nvidia-nvjpeg wheel's nvidia/cu13/lib/libnvjpeg.so.13 works through DT_NVJPEG_LIB. */
#ifndef DT_NVJPEG_H
#define DT_NVJPEG_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* nvJPEG's types, as its ABI has them (nvjpeg.h): handles are opaque pointers, enums ints. */
typedef int dt_nvjpeg_status;                /* nvjpegStatus_t: 0 = success */
typedef struct dt_nvjpeg_handle_ *dt_nvjpeg_handle;
typedef struct dt_nvjpeg_state_ *dt_nvjpeg_state;
typedef struct dt_nvjpeg_stream_ *dt_nvjpeg_jpeg_stream;
typedef struct {
    unsigned char *channel[4]; /* NVJPEG_MAX_COMPONENT planes; interleaved RGB uses channel[0] */
    size_t pitch[4];           /* bytes per row of each plane */
} dt_nvjpeg_image;

enum {
    DT_NVJPEG_BACKEND_DEFAULT = 0,  /* hybrid: Huffman decoding on the CPU, the rest on the GPU */
    DT_NVJPEG_BACKEND_HARDWARE = 3, /* the A100/H100-class JPEG engines: baseline, one scan */
    DT_NVJPEG_OUTPUT_RGBI = 5,      /* interleaved RGB in channel[0]: [h, w, 3] u8 */
    DT_NVJPEG_CSS_444 = 0,          /* nvjpegChromaSubsampling_t: full-resolution chroma, the most memory */
};

/* The entry points deftc calls; NULL where the loaded library lacks an optional one. */
typedef struct {
    dt_nvjpeg_status (*CreateEx)(int backend, void *dev_allocator, void *pinned_allocator, unsigned flags,
                                 dt_nvjpeg_handle *handle);
    dt_nvjpeg_status (*Destroy)(dt_nvjpeg_handle handle);
    dt_nvjpeg_status (*JpegStateCreate)(dt_nvjpeg_handle handle, dt_nvjpeg_state *state);
    dt_nvjpeg_status (*JpegStateDestroy)(dt_nvjpeg_state state);
    dt_nvjpeg_status (*DecodeBatchedInitialize)(dt_nvjpeg_handle handle, dt_nvjpeg_state state, int batch_size,
                                                int max_cpu_threads, int output_format);
    /* data [n] host pointers to whole files, lengths [n] bytes, out [n] images; stream: a
     * cudaStream_t */
    dt_nvjpeg_status (*DecodeBatched)(dt_nvjpeg_handle handle, dt_nvjpeg_state state, const unsigned char *const *data,
                                      const size_t *lengths, dt_nvjpeg_image *out, void *stream);
    dt_nvjpeg_status (*JpegStreamCreate)(dt_nvjpeg_handle handle, dt_nvjpeg_jpeg_stream *s);
    dt_nvjpeg_status (*JpegStreamDestroy)(dt_nvjpeg_jpeg_stream s);
    dt_nvjpeg_status (*JpegStreamParseHeader)(dt_nvjpeg_handle handle, const unsigned char *data, size_t length,
                                              dt_nvjpeg_jpeg_stream s);
    /* *unsupported = 0 when the batched decoder of this handle can decode the parsed stream */
    dt_nvjpeg_status (*DecodeBatchedSupported)(dt_nvjpeg_handle handle, dt_nvjpeg_jpeg_stream s, int *unsupported);
    dt_nvjpeg_status (*GetProperty)(int type, int *value); /* type 0, 1, 2: major, minor, patch */
    /* the hardware backend's buffers for batches of up to batch_size images of up to width x
     * height allocated now, so that nvjpegDecodeBatched does not free and reallocate them as
     * the images' sizes change (optional: nvJPEG 11.4 and later) */
    dt_nvjpeg_status (*DecodeBatchedPreAllocate)(dt_nvjpeg_handle handle, dt_nvjpeg_state state, int batch_size,
                                                 int width, int height, int chroma_subsampling, int output_format);
} dt_nvjpeg_api;

/* The library, loaded on the first call (thread-safe); NULL when it cannot be, with `why`
 * saying what was tried. */
const dt_nvjpeg_api *dt_nvjpeg(const char **why);
/* "nvJPEG 13.0.1 (/usr/local/cuda/lib64/libnvjpeg.so.13)" once loaded, else "" */
const char *dt_nvjpeg_describe(void);
/* nvjpegStatus_t as text: "NVJPEG_STATUS_BAD_JPEG" */
const char *dt_nvjpeg_status_str(dt_nvjpeg_status s);

#ifdef __cplusplus
}
#endif
#endif
