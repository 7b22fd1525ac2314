/* nvJPEG loaded at run time (dt_nvjpeg.h). */
#define _GNU_SOURCE /* dladdr: the path the library was loaded from */
#include "data/dt_nvjpeg.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dt_nvjpeg_api g_api;
static int g_loaded;
static char g_why[1024], g_desc[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* dlsym into a function pointer (ISO C has no object-to-function cast; POSIX guarantees the
 * representation, so copy the bytes). */
static int sym(void *lib, const char *name, void *fn_ptr, int required) {
    void *p = dlsym(lib, name);
    if (!p && required) {
        snprintf(g_why, sizeof g_why, "the nvJPEG library lacks %s (too old: deftc needs nvJPEG 11 or later)", name);
        return -1;
    }
    memcpy(fn_ptr, &p, sizeof p);
    return 0;
}

static void load(void) {
    char tried[768] = "";
    const char *env = getenv("DT_NVJPEG_LIB"), *cuda = getenv("CUDA_HOME");
    char home13[512] = "";
    if (cuda && *cuda) snprintf(home13, sizeof home13, "%s/lib64/libnvjpeg.so.13", cuda);
    if (!strcmp(home13, "/usr/local/cuda/lib64/libnvjpeg.so.13")) home13[0] = 0; /* tried last anyway */
    const char *names[] = {env && *env ? env : NULL, "libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11",
                           home13[0] ? home13 : NULL, "/usr/local/cuda/lib64/libnvjpeg.so.13"};
    void *lib = NULL;
    const char *found = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names && !lib; i++) {
        if (!names[i]) continue;
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            found = names[i];
        } else {
            size_t len = strlen(tried);
            snprintf(tried + len, sizeof tried - len, "%s%s", len ? ", " : "", names[i]);
        }
        if (!lib && names[i] == env) { /* the user named one: that one or none */
            snprintf(g_why, sizeof g_why, "cannot load DT_NVJPEG_LIB=%s: %s", env, dlerror());
            return;
        }
    }
    if (!lib) {
        snprintf(g_why, sizeof g_why,
                 "nvJPEG is not installed here (tried %s; it ships with the CUDA toolkit, or set DT_NVJPEG_LIB to a "
                 "libnvjpeg.so)",
                 tried);
        return;
    }
    dt_nvjpeg_api a;
    memset(&a, 0, sizeof a);
    if (sym(lib, "nvjpegCreateEx", &a.CreateEx, 1) || sym(lib, "nvjpegDestroy", &a.Destroy, 1) ||
        sym(lib, "nvjpegJpegStateCreate", &a.JpegStateCreate, 1) ||
        sym(lib, "nvjpegJpegStateDestroy", &a.JpegStateDestroy, 1) ||
        sym(lib, "nvjpegDecodeBatchedInitialize", &a.DecodeBatchedInitialize, 1) ||
        sym(lib, "nvjpegDecodeBatched", &a.DecodeBatched, 1) || sym(lib, "nvjpegJpegStreamCreate", &a.JpegStreamCreate, 1) ||
        sym(lib, "nvjpegJpegStreamDestroy", &a.JpegStreamDestroy, 1) ||
        sym(lib, "nvjpegJpegStreamParseHeader", &a.JpegStreamParseHeader, 1) ||
        sym(lib, "nvjpegDecodeBatchedSupported", &a.DecodeBatchedSupported, 1) ||
        sym(lib, "nvjpegGetProperty", &a.GetProperty, 0) ||
        sym(lib, "nvjpegDecodeBatchedPreAllocate", &a.DecodeBatchedPreAllocate, 0)) {
        dlclose(lib);
        return;
    }
    int v[3] = {0, 0, 0};
    for (int i = 0; i < 3 && a.GetProperty; i++) a.GetProperty(i, &v[i]);
    char path[400] = "";
    Dl_info info;
    void *any;
    memcpy(&any, &a.CreateEx, sizeof any);
    snprintf(path, sizeof path, "%s", dladdr(any, &info) && info.dli_fname ? info.dli_fname : found);
    snprintf(g_desc, sizeof g_desc, "nvJPEG %d.%d.%d (%s)", v[0], v[1], v[2], path);
    g_api = a;
    g_loaded = 1; /* the library stays loaded for the life of the process */
}

const dt_nvjpeg_api *dt_nvjpeg(const char **why) {
    pthread_once(&g_once, load);
    if (why) *why = g_loaded ? "" : g_why;
    return g_loaded ? &g_api : NULL;
}

const char *dt_nvjpeg_describe(void) { return g_loaded ? g_desc : ""; }

const char *dt_nvjpeg_status_str(dt_nvjpeg_status s) {
    static const char *names[] = {"NVJPEG_STATUS_SUCCESS",
                                  "NVJPEG_STATUS_NOT_INITIALIZED",
                                  "NVJPEG_STATUS_INVALID_PARAMETER",
                                  "NVJPEG_STATUS_BAD_JPEG",
                                  "NVJPEG_STATUS_JPEG_NOT_SUPPORTED",
                                  "NVJPEG_STATUS_ALLOCATOR_FAILURE",
                                  "NVJPEG_STATUS_EXECUTION_FAILED",
                                  "NVJPEG_STATUS_ARCH_MISMATCH",
                                  "NVJPEG_STATUS_INTERNAL_ERROR",
                                  "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
                                  "NVJPEG_STATUS_INCOMPLETE_BITSTREAM"};
    return s >= 0 && s < (int)(sizeof names / sizeof *names) ? names[s] : "an unknown nvJPEG status";
}
