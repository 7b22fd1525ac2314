/* The loader's image cache (cache=1): each image decoded once at cache_size, published with
 * compare-and-swap, read by any worker (dt_loader_internal.h). */
#include "data/dt_loader_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "core/dt_alloc.h"
#include "core/dt_device.h"
#include "core/dt_file.h"
#include "data/dt_gpu_decode.h"
#include "data/dt_image.h"
#include "data/dt_image_header.h"
#include "core/dt_rng.h"
#include "core/dt_timer.h"
#include "data/dt_transform.h"

/* The cached form of image idx: its shorter side reduced to cache_size (never enlarged),
 * decoded and published the first time. When it is not kept (the cache is full), *tmp holds
 * it and *owned is set: the caller frees it. */
const dt_image *loader_cached_image(worker_ctx *w, int64_t idx, dt_image *tmp, int *owned, dt_err *err) {
    dt_loader *l = w->l;
    *owned = 0;
    cached *c = atomic_load_explicit(&l->cache[idx], memory_order_acquire);
    if (c) return &c->img;
    size_t n;
    int iw, ih, rw, rh;
    if (loader_read_and_probe(l, &w->file, idx, &n, &iw, &ih, err)) return NULL;
    int sh = iw < ih ? iw : ih;
    if (sh > l->cache_size)
        dt_resize_shorter_dims(iw, ih, l->cache_size, &rw, &rh);
    else
        rw = iw, rh = ih;
    /* A JPEG may come out of the decoder already reduced, down to the cache size. */
    double need = (double)rw / iw > (double)rh / ih ? (double)rw / iw : (double)rh / ih;
    if (dt_image_decode(w->file.p, n, l->ds->paths[idx], l->max_pixels, need, tmp, err)) return NULL;
    c = dt_xmalloc(sizeof *c);
    if (tmp->w != rw || tmp->h != rh) {
        c->img.w = rw;
        c->img.h = rh;
        c->img.pix = dt_xmalloc((size_t)rw * rh * 3);
        dt_image_resize(tmp, rw, rh, c->img.pix, &w->resample);
        dt_image_free(tmp);
    } else {
        c->img = *tmp; /* the decoder's buffer is plain malloc memory: take it over */
        tmp->pix = NULL;
    }
    size_t bytes = (size_t)c->img.w * c->img.h * 3 + sizeof *c;
    size_t before = atomic_fetch_add(&l->cache_bytes, bytes);
    int fits = !l->cache_max || before + bytes <= l->cache_max;
    cached *expected = NULL;
    if (fits && atomic_compare_exchange_strong_explicit(&l->cache[idx], &expected, c, memory_order_acq_rel,
                                                        memory_order_acquire)) {
        atomic_fetch_add(&l->cache_images, 1);
        return &c->img;
    }
    atomic_fetch_sub(&l->cache_bytes, bytes);
    if (!fits && !atomic_exchange(&l->cache_full_warned, 1))
        dt_warn("loader cache is full (%d MB): further images are decoded every epoch", l->o.cache_max_mb);
    if (expected) { /* another worker cached the same image first: identical, use it */
        free(c->img.pix);
        free(c);
        return &expected->img;
    }
    *tmp = c->img; /* not kept: the caller frees it after the transform */
    free(c);
    *owned = 1;
    return tmp;
}
