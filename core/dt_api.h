/* dt_api.h: what libdeftc.so exports. The library is compiled with hidden visibility, so
 * only declarations between DT_PUBLIC_BEGIN and DT_PUBLIC_END - the public headers, listed in
 * the README's layout table - are visible to programs that load the shared library (the
 * PyTorch drop-in, a C program); kernels, workspaces and internal helpers are not. Programs
 * that link the static library (build/train, build/test, the benchmarks) see everything. */
#ifndef DT_API_H
#define DT_API_H

#if defined(__GNUC__)
#define DT_PUBLIC_BEGIN _Pragma("GCC visibility push(default)")
#define DT_PUBLIC_END _Pragma("GCC visibility pop")
#else
#define DT_PUBLIC_BEGIN
#define DT_PUBLIC_END
#endif

#endif
