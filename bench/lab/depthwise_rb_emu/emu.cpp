/* The CPU emulation of ops/conv/depthwise_rb.cuh against the CPU twins (run.sh says how it is
 * built): each shape below, fwd / dgrad / wgrad, fp32 and bf16, R = 8 and 4; one line a case,
 * the last "N failures"; exit status 1 on any. */
#include "depthwise_rb_emu.cuh"
#include <cstdio>
#include <cstdlib>
#include <random>
extern "C" {
#include "ops/conv/depthwise.h"
}
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
thread_local std::barrier<> *g_bar;
thread_local float *g_smem;

static int fails = 0;
template <typename T>
static void run(int64_t N, int64_t C, int64_t H, int64_t W, dt_conv_geom g, int bf, int RR) {
    dt_conv_problem p = dt_conv_problem_of(N, C, H, W, C, g, C);
    const int64_t nx = N * C * H * W, ny = N * C * p.Ho * p.Wo, nw = C * g.kh * g.kw;
    std::mt19937 rng(nx + ny * 7 + g.dw);
    std::uniform_real_distribution<float> U(-1, 1);
    auto mk = [&](int64_t n) { std::vector<T> v(n); for (auto &e : v) dt_st(&e, U(rng)); return v; };
    auto ab = [&](const std::vector<T> &v) { std::vector<T> a(v.size()); for (size_t i = 0; i < v.size(); i++) dt_st(&a[i], fabsf(dt_ld(&v[i]))); return a; };
    auto x = mk(nx), w = mk(nw), dy = mk(ny);
    auto ax = ab(x), aw = ab(w), ady = ab(dy);
    std::vector<float> bias(C), abias(C);
    for (int64_t i = 0; i < C; i++) bias[i] = U(rng), abias[i] = fabsf(bias[i]);
    auto F = [&](int pass, const void *a, const void *b, const float *bi, void *o) {
        if (bf) { if (pass == 0) dt_dw_fwd_bf16_nhwc_cpu(&p, a, b, bi, o); else if (pass == 1) dt_dw_dgrad_bf16_nhwc_cpu(&p, a, b, 0, o); else dt_dw_wgrad_bf16_nhwc_cpu(&p, a, b, 0, (float *)o); }
        else { if (pass == 0) dt_dw_fwd_f32_nhwc_cpu(&p, a, b, bi, o); else if (pass == 1) dt_dw_dgrad_f32_nhwc_cpu(&p, a, b, 0, o); else dt_dw_wgrad_f32_nhwc_cpu(&p, a, b, 0, (float *)o); }
    };
    for (int pass = 0; pass < 3; pass++) {
        if (!dw_rb::supported(&p, pass)) { printf("skip pass %d\n", pass); continue; }
        const int64_t n = pass == 0 ? ny : pass == 1 ? nx : nw;
        std::vector<float> rf(n), sf(n), gf(n, NAN);
        if (pass < 2) {
            std::vector<T> r(n), s(n), gt(n);
            for (auto &e : gt) dt_st(&e, NAN);
            F(pass, pass == 0 ? x.data() : dy.data(), w.data(), bias.data(), r.data());
            F(pass, pass == 0 ? ax.data() : ady.data(), aw.data(), abias.data(), s.data());
            if (pass == 0) dw_rb::fwd<T>(&p, x.data(), w.data(), bias.data(), gt.data(), RR);
            else dw_rb::dgrad<T>(&p, dy.data(), w.data(), 0.0f, gt.data(), RR);
            for (int64_t i = 0; i < n; i++) rf[i] = dt_ld(&r[i]), sf[i] = dt_ld(&s[i]), gf[i] = dt_ld(&gt[i]);
        } else {
            F(2, x.data(), dy.data(), NULL, rf.data());
            F(2, ax.data(), ady.data(), NULL, sf.data());
            std::vector<float> part(dw_rb::wgrad_scratch(&p, RR), NAN);
            dw_rb::wgrad<T>(&p, x.data(), dy.data(), 0.0f, gf.data(), part.data(), RR);
        }
        int64_t bad = 0, exact = 0;
        for (int64_t i = 0; i < n; i++) {
            const double tol = pass == 2 ? 2e-4 * sf[i] + 1e-30 : (bf ? 0.0078125 * fabs(rf[i]) : 0) + 1e-5 * sf[i] + 1e-30;
            if (!(fabs(gf[i] - rf[i]) <= tol)) { if (bad < 3) printf("   [%lld] got %g ref %g\n", (long long)i, gf[i], rf[i]); bad++; }
            exact += gf[i] == rf[i];
        }
        printf("R%d %s N%lld C%lld %lldx%lld k%dx%d s%d p%d d%d %s pass %d: %lld bad, %lld/%lld exact\n", RR, bad ? "FAIL" : "ok  ", (long long)N, (long long)C,
               (long long)H, (long long)W, g.kh, g.kw, g.sw, g.pw, g.dw, bf ? "bf16" : "fp32", pass, (long long)bad, (long long)exact, (long long)n);
        fails += bad > 0;
    }
}
int main(int argc, char **argv) {
    struct { int64_t N, C, H, W; dt_conv_geom g; } S[] = {
        {2, 8, 1, 40 + 63 * 1, {1, 64, 1, 1, 0, 0, 1, 1}},
        {1, 4, 1, 30 + 63 * 2, {1, 64, 1, 1, 0, 0, 1, 2}},
        {2, 6, 1, 50 + 15 * 3, {1, 16, 1, 1, 0, 0, 1, 3}},
        {1, 4, 1, 70 + 3 * 8, {1, 4, 1, 1, 0, 0, 1, 8}},
        {1, 4, 1, 33, {1, 1, 1, 1, 0, 0, 1, 2}},
        {1, 8, 1, 100 + 15 * 16, {1, 16, 1, 1, 0, 0, 1, 16}},
        {2, 6, 9, 11, dt_geom(3, 1, 1, 1)},
        {1, 4, 10, 13, dt_geom(3, 2, 1, 1)},
        {1, 4, 9, 12, dt_geom(3, 2, 1, 1)},
        {1, 4, 11, 17, {3, 3, 2, 2, 2, 2, 3, 3}},
        {1, 2, 7, 23, {3, 3, 2, 2, 1, 3, 2, 2}},
        {1, 144, 3, 9, dt_geom(3, 1, 1, 1)},
        {1, 70, 3, 9, dt_geom(3, 2, 1, 1)},
        {1, 4, 9, 19, dt_geom(7, 1, 3, 1)},
        {1, 4, 5, 40, {1, 5, 1, 1, 0, 2, 1, 2}},
        {1, 4, 5, 40, {1, 5, 1, 2, 0, 2, 1, 1}},
        {2, 64, 7, 7, dt_geom(3, 1, 1, 1)},
        {2, 64, 14, 14, dt_geom(3, 2, 1, 1)},
        {3, 8, 5, 3, dt_geom(3, 1, 1, 1)},
        {2, 32, 1, 64 + 63 * 4, {1, 64, 1, 1, 0, 0, 1, 4}},
    };
    int only = argc > 1 ? atoi(argv[1]) : -1, cases = 0, failed = 0;
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        if (only >= 0 && (int)i != only) continue;
        for (int RR = 8; RR >= 4; RR -= 4) {
            /* a case: one shape, run length and dtype, its three passes */
            int before = fails;
            run<float>(S[i].N, S[i].C, S[i].H, S[i].W, S[i].g, 0, RR);
            failed += fails > before, cases++, before = fails;
            run<__nv_bfloat16>(S[i].N, S[i].C, S[i].H, S[i].W, S[i].g, 1, RR);
            failed += fails > before, cases++;
        }
    }
    /* the line build/test --then counts (make test runs this emulator in CPU-only builds) */
    printf("%d passed, %d failed\n", cases - failed, failed);
    return fails != 0;
}
