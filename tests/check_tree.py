#!/usr/bin/env python3
"""The tree's house rules (issue 33), checked by `make test`:

  1. no include circle at file level: no headers that include each other, and no source files
     that use each other (A uses B when A's object refers to a symbol B's object defines);
  2. no stem shared by two different things: all files of one stem (C, CUDA, Python, shell)
     lie in one folder;
  3. no function in train/ or data/ over 100 lines (from its signature to its closing brace);
  4. the code names of the docs (docs/*.md, README.md) exist: every file path (`core/dt_tensor.h`,
     `ops/conv/conv_igemm.{h,cu}`, `kernels/pool.*`) is in the tree, and every identifier written
     in backticks (one with an underscore: `dt_train_run`, `conv_algo`, `gpu_cases_*_parity`)
     is a word of the sources or a test's name;
  5. the library never ends the process: no exit( / _exit( / abort( / quick_exit( in library
     sources (core/, ops/, models/, data/, train/ as the Makefile's LIB_C takes them: not the
     programs' *_main.c nor build/train's command line, train/train_cli.c). Failures raise to a
     guard and come back as statuses (core/dt_common.h); programs' main()s own the exit;
  6. no DT_CUDA dispatch outside core/'s device layer: library sources outside core/ never test
     DT_CUDA (they call core's functions, which exist in both builds, or op tables; a file that
     is CUDA throughout is a build-level choice in the Makefile, with its CPU-only stand-in);
  7. libdeftc.so (in BUILD) exports deftc's C API alone: every defined dynamic symbol starts
     with dt_ (core/libdeftc.map; a CUDA build's C++ runtime symbols, exported, stood in for a
     host process's own libstdc++);
  8. no host code that nvcc compiled to exit(1): where host code calls a __device__-only
     function that nvcc does not refuse (a template's, seen in the one-launch batch norm on
     2026-12-06), the host side of the caller becomes a call to exit - no message, no error,
     even with -Werror. In the CUDA objects (BUILD/obj/.../*.cu.o) nvcc's host shadows of
     __device__ functions are such stubs, and are never called; a function that calls exit
     among other calls, a stub with C linkage (dt_...), or a function calling a stub is one.

usage: tests/check_tree.py [BUILD]   (the build folder: its objects give the file graph, its
                                     build/test --all --list the tests' names)
Prints ok or FAIL for each of the eight checks (each violation under it) and, last, "N passed, N
failed, 0 skipped" (build/test --then counts them as a suite); exits 1 when one fails.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
SRC_EXT = ('.c', '.h', '.cu', '.cuh', '.inc')
# Files the checks leave alone (none now: the Hopper engine is built).
NOT_BUILT = set()
FUNC_LIMIT = 100
# Names the docs may write that are not in the tree: outside files (system headers, the lead's
# shared/ yardstick), placeholders, and the names the docs cite as removed.
EXTERNAL = {'jpeglib.h', 'png.h', 'nccl.h', 'stb_image.h', 'stb_image_write.h', 'cublas_v2.h',
            'torch_reference.py'}
PLACEHOLDER_STEMS = {'name', 'NAME', 'CONFIG', 'FILE', 'x', 'X'}
REMOVED = {'main_igemm', 'DT_DEFORM_API_BF16', 'engine_sampler',
           # the one-launch batch norm, measured and dropped (docs/batchnorm.md, docs/PERF.md section 26)
           'k_nhwc_forward_of_groups', 'k_nhwc_backward', 'dt_bn_forward_of_sums'}
OUTSIDE = ('build/', 'build-', 'runs/', 'shared/', '/', 'data_sample/', 'http')
FORMULA = re.compile(r' [-+=.*/] ')

problems = []


def tracked():
    try:
        out = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        files = out.split('\n')
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk the folders
        files = []
        for d, dirs, fs in os.walk(ROOT):
            dirs[:] = [x for x in dirs if not x.startswith(('.', 'build'))]
            files += [os.path.relpath(os.path.join(d, f), ROOT) for f in fs]
    return sorted(f for f in files if f and os.path.isfile(os.path.join(ROOT, f)))


def read(path):
    with open(os.path.join(ROOT, path), encoding='utf-8', errors='replace') as f:
        return f.read()


def tarjan(graph):
    """The strongly connected components of more than one node (the cycles) of graph."""
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def push(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        return (v, iter(sorted(graph.get(v, ()))))

    for root in sorted(set(graph) | {m for s in graph.values() for m in s}):
        if root in index:
            continue
        work = [push(root)]
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    work.append(push(w))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        sccs.append(sorted(comp))
    return sccs


def check_circles(files, build):
    """Headers that include each other, and source files that use each other: file A uses file B
    when A's object refers to a symbol (a function, a variable) that B's object defines - the
    include of B's header that the call needs, checked where it is used, whatever header
    declares it. Hooks (a function pointer set at load time) are how a lower file calls up."""
    present = set(files)
    inc = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
    headers = {}
    for f in files:
        if f.endswith(('.h', '.cuh', '.inc')) and f not in NOT_BUILT:
            headers[f] = {n for n in inc.findall(read(f)) if n in present and n != f}
        if f.endswith(SRC_EXT) and f not in NOT_BUILT:
            for n in inc.findall(read(f)):
                if '/' in n and n not in present:
                    problems.append('%s: includes "%s", which is not in the tree' % (f, n))
    for comp in tarjan(headers):
        problems.append('header include circle: ' + ' <-> '.join(comp))
    if not build:
        return
    objdir = os.path.join(build, 'obj')
    lib = ('core/', 'ops/', 'models/', 'data/', 'train/')
    objs = {}
    for f in files:
        if f.startswith(lib) and f.endswith(('.c', '.cu')) and f not in NOT_BUILT:
            o = os.path.join(objdir, f[:-2] + '.o' if f.endswith('.c') else f + '.o')
            if os.path.isfile(o):
                objs[f] = o
    if not objs:
        problems.append('no library object under %s: build first (make), then run the check' % objdir)
        return
    try:
        out = subprocess.run(['nm', '-A'] + sorted(objs.values()), capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        problems.append('nm failed on the objects of %s: %s' % (build, e))
        return
    src_of = {o: f for f, o in objs.items()}
    defines, refers = {}, {}
    for line in out.split('\n'):
        m = re.match(r'^(.*?):\s*(?:[0-9a-fA-F]+)?\s+([A-Za-z])\s+(\S+)$', line)
        if not m or m.group(1) not in src_of:
            continue
        f, kind, sym = src_of[m.group(1)], m.group(2), m.group(3)
        if kind == 'U':
            refers.setdefault(f, set()).add(sym)
        elif kind.isupper() and kind not in 'UVW':
            defines.setdefault(sym, f)
    uses = {f: {defines[s] for s in syms if s in defines and defines[s] != f} for f, syms in refers.items()}
    for comp in tarjan(uses):
        edges = ['%s -> %s' % (a, b) for a in comp for b in sorted(uses.get(a, ())) if b in comp]
        problems.append('file circle: %s (%s)' % (' <-> '.join(comp), '; '.join(edges)))


def check_stems(files):
    where = {}
    for f in files:
        if f.endswith(SRC_EXT + ('.py', '.sh')) and f not in NOT_BUILT:
            d, b = os.path.split(f)
            stem = re.sub(r'_cpu$', '', re.sub(r'\.[^.]+$', '', b))
            where.setdefault(stem, set()).add(d)
    for stem, dirs in sorted(where.items()):
        if len(dirs) > 1:
            problems.append('stem "%s" names files in %s' % (stem, ', '.join(sorted(dirs))))


def strip_comments_strings(src):
    out = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), src, flags=re.S)
    out = re.sub(r'//[^\n]*', '', out)
    out = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', out)
    out = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", out)
    return out


def functions(src):
    """(name, first line, line count) of each top-level function definition."""
    text = strip_comments_strings(src)
    depth, start, out = 0, None, []
    line = 1
    head_line = None
    for i, ch in enumerate(text):
        if ch == '\n':
            line += 1
        elif ch == '{':
            if depth == 0:
                # the statement before the brace: a function when it ends in ')' (and is no
                # initializer, struct or enum)
                j = max(text.rfind(';', 0, i), text.rfind('}', 0, i), text.rfind('#', 0, i))
                head = text[j + 1:i]
                m = re.search(r'(\w+)\s*\([^;{}]*\)\s*(?:__attribute__\s*\(\(.*\)\)\s*)?$', head, re.S)
                if m and '=' not in head.split('(')[0] and not re.search(r'\b(struct|enum|union)\s*\w*\s*$', head):
                    start = m.group(1)
                    head_line = line - head[m.start():].count('\n')
                else:
                    start = None
            depth += 1
        elif ch == '}':
            depth -= 1
            if depth == 0 and start:
                out.append((start, head_line, line - head_line + 1))
                start = None
    return out


def check_functions(files):
    for f in files:
        if f.startswith(('train/', 'data/')) and f.endswith(('.c', '.cu')):
            for name, first, n in functions(read(f)):
                if n > FUNC_LIMIT:
                    problems.append('%s:%d: %s is %d lines (at most %d)' % (f, first, name, n, FUNC_LIMIT))


def expand_braces(s):
    m = re.search(r'\{([^{}]*)\}', s)
    if not m:
        return [s]
    return [x for alt in m.group(1).split(',') for x in expand_braces(s[:m.start()] + alt + s[m.end():])]


PATH_RE = re.compile(r'(?<![\w./-])((?:\.ci|[\w-]+)/[\w./{},*-]*[\w*}]|[\w*-]+\.(?:c|h|cu|cuh|py|sh|cfg|inc)\b)')
FILE_EXT = ('.c', '.h', '.cu', '.cuh', '.py', '.sh', '.cfg', '.inc', '.md', '.png', '.json', '.txt')
TOP = ('core/', 'ops/', 'models/', 'data/', 'train/', 'tests/', 'bench/', 'python/', 'configs/',
       'docs/', '.ci/')


def check_docs(files, testbin):
    docs = [f for f in files if (f.startswith('docs/') and f.endswith('.md')) or f == 'README.md']
    present = set(files)
    dirs = {os.path.dirname(f) for f in files}
    dirs |= {d.rsplit('/', k)[0] for d in list(dirs) for k in range(1, 4) if '/' in d}
    basenames = {os.path.basename(f) for f in files}
    stems = {re.sub(r'\.[^.]+$', '', b) for b in basenames}
    corpus_files = [f for f in files if f not in docs and not f.startswith('docs/')
                    and (f.endswith(SRC_EXT + ('.cpp', '.py', '.sh', '.cfg')) or f in ('Makefile',) or f.startswith('.ci/'))]
    words = set()
    for f in corpus_files:
        words.update(re.findall(r'[A-Za-z_][A-Za-z0-9_]*', read(f)))
    if testbin:
        try:
            out = subprocess.run([testbin, '--all', '--list'], capture_output=True, text=True, timeout=60).stdout
            words.update(out.split())
        except OSError:
            pass
    words |= stems
    wordtext = '\n'.join(sorted(words))

    def path_exists(p):
        p = p.rstrip('/.')
        for alt in expand_braces(p):
            if '*' in alt:
                rx = re.compile('^' + re.escape(alt).replace(r'\*', r'[^/]*') + '$')
                if not any(rx.match(f) for f in present) and not any(rx.match(d) for d in dirs):
                    return False
            elif alt not in present and alt not in dirs:
                if '/' in alt and alt.split('/')[-1] and not os.path.splitext(alt)[1]:
                    # a module without its extension (`ops/deform/deform_f64`): any of its files
                    if not any(f.startswith(alt + '.') or f.startswith(alt + '_cpu.') for f in present):
                        return False
                else:
                    return False
        return True

    for doc in docs:
        for ln, line in enumerate(read(doc).split('\n'), 1):
            for m in re.finditer(r'`([^`]+)`', line):
                span = m.group(1)
                for pm in PATH_RE.finditer(span):
                    p = pm.group(1)
                    if p.startswith(OUTSIDE) or p in EXTERNAL:
                        continue
                    if '/' in p:
                        if not p.startswith(TOP) and p.split('/')[0] not in ('kernels', 'layers'):
                            continue  # not a path of the tree (a ratio, a key's values, elsewhere)
                        if not path_exists(p):
                            problems.append('%s:%d: `%s` names %s, which is not in the tree' % (doc, ln, span, p))
                    else:
                        stem = re.sub(r'(_cpu)?\.[^.]+$', '', p)
                        if stem in PLACEHOLDER_STEMS or stem in ('', '*', '*_op', '_op'):
                            continue
                        rx = re.compile('^' + re.escape(p).replace(r'\*', r'[^/]*') + '$')
                        if not any(rx.match(b) for b in basenames):
                            problems.append('%s:%d: `%s` names %s, which is not in the tree' % (doc, ln, span, p))
                if FORMULA.search(span):
                    continue  # a formula, not code
                for im in re.finditer(r'(?<![\w.$/{},*-])([A-Za-z_{][A-Za-z0-9_*{},]*)(?![\w-]|\.\w)', span):
                    for name in expand_braces(im.group(1)):
                        name = name.strip(',')
                        if '_' not in name or name.startswith('_') or name in REMOVED:
                            continue
                        if name.endswith('_') and '*' not in name:
                            continue
                        if '*' in name:
                            rx = '^' + re.escape(name).replace(r'\*', r'\w*') + '$'
                            if not re.search(rx, wordtext, re.M):
                                problems.append('%s:%d: `%s`: no name in the tree matches %s' % (doc, ln, span, name))
                        elif name not in words:
                            problems.append('%s:%d: `%s`: %s is not a name in the tree' % (doc, ln, span, name))


def check_public_list(files):
    """The README's list of public headers is the headers with a DT_PUBLIC_BEGIN block."""
    text = read('README.md')
    start = text.find('The public headers')
    if start < 0:
        problems.append('README.md: no paragraph "The public headers ..."')
        return
    end = text.find('\n\n', start)
    listed = set(re.findall(r'`([\w./]+\.h)`', text[start:end])) - {'core/dt_api.h'}
    public = {os.path.basename(f) for f in files if f.endswith('.h') and f != 'core/dt_api.h'
              and f not in NOT_BUILT and 'DT_PUBLIC_BEGIN' in read(f)}
    for h in sorted(public - listed):
        problems.append('README.md: the public headers omit %s (it has a DT_PUBLIC_BEGIN block)' % h)
    for h in sorted(listed - public):
        problems.append('README.md: the public headers name %s, which has no DT_PUBLIC_BEGIN block' % h)


LIB_DIRS = ('core/', 'ops/', 'models/', 'data/', 'train/')
PROGRAM_FILES = {'train/train_cli.c'}
ENDS_PROCESS = re.compile(r'(?<![\w.>])(exit|_exit|_Exit|quick_exit|abort)\s*\(')


def library_sources(files):
    return [f for f in files if f.startswith(LIB_DIRS) and f.endswith(SRC_EXT) and not f.endswith('_main.c')
            and f not in PROGRAM_FILES and f not in NOT_BUILT]


def check_no_exit(files):
    for f in library_sources(files):
        code = strip_comments_strings(read(f))
        for m in ENDS_PROCESS.finditer(code):
            line = code.count('\n', 0, m.start()) + 1
            problems.append('%s:%d: %s( in library code: raise (dt_fatal / dt_fail) and let the program decide' %
                            (f, line, m.group(1)))


TESTS_CUDA = re.compile(r'^\s*#\s*(?:if|ifdef|ifndef|elif)\b[^\n]*\bDT_CUDA\b', re.M)


def check_no_cuda_dispatch(files):
    for f in library_sources(files):
        if f.startswith('core/'):
            continue
        code = strip_comments_strings(read(f))
        for m in TESTS_CUDA.finditer(code):
            line = code.count('\n', 0, m.start()) + 1
            problems.append('%s:%d: tests DT_CUDA outside core/: call the device layer (core/) or an op table' % (f, line))


def check_exports(build):
    lib = os.path.join(build, 'libdeftc.so') if build else None
    if not lib or not os.path.isfile(lib):
        problems.append('%s: not built (make lib): its exports are not checked' % (lib or 'BUILD/libdeftc.so'))
        return
    out = subprocess.run(['nm', '-D', '--defined-only', lib], capture_output=True, text=True)
    if out.returncode != 0:
        problems.append('nm -D %s failed: %s' % (lib, out.stderr.strip()))
        return
    names = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
    foreign = [n for n in names if not n.startswith('dt_')]
    if not any(n.startswith('dt_') for n in names):
        problems.append('%s exports no dt_ function' % lib)
    if foreign:
        problems.append('%s exports %d symbols that are not dt_ (core/libdeftc.map), e.g. %s'
                        % (lib, len(foreign), ', '.join(foreign[:5])))


def exit_stub_problems(obj):
    out = subprocess.run(['objdump', '-dr', '--no-show-raw-insn', '-C', obj], capture_output=True, text=True)
    if out.returncode != 0:
        problems.append('objdump -dr %s failed: %s' % (obj, out.stderr.strip()))
        return
    funcs, cur = {}, None  # function -> the symbols its relocations name (its calls)
    for line in out.stdout.splitlines():
        m = re.match(r'^[0-9a-f]+ <(.*)>:$', line)
        if m:
            cur = m.group(1)
            funcs.setdefault(cur, [])
            continue
        m = re.search(r'\sR_X86_64_(?:PLT32|PC32)\s+(.*?)(?:[-+]0x[0-9a-f]+)?$', line)
        if m and cur is not None:
            funcs[cur].append(m.group(1))
    stubs = {f for f, calls in funcs.items() if 'exit' in calls}
    rel = os.path.relpath(obj, ROOT)
    for f, calls in funcs.items():
        if f in stubs and (f.startswith('dt_') or any(c != 'exit' for c in calls)):
            problems.append('%s: %s ends the process (nvcc compiled a call to a __device__ function to exit(1))'
                            % (rel, f[:160]))
        elif f not in stubs and any(c in stubs for c in calls):
            stub = next(c for c in calls if c in stubs)
            problems.append('%s: %s calls %s, which nvcc compiled to exit(1)' % (rel, f[:120], stub[:120]))


def check_exit_stubs(build):
    objdir = os.path.join(build, 'obj') if build else None
    if not objdir or not os.path.isdir(objdir):
        return
    for d in LIB_DIRS:
        for dirpath, _, names in os.walk(os.path.join(objdir, d)):
            for n in sorted(names):
                if n.endswith('.cu.o'):
                    exit_stub_problems(os.path.join(dirpath, n))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else None
    testbin = os.path.join(build, 'test') if build and os.path.isfile(os.path.join(build, 'test')) else None
    files = tracked()
    failed = 0
    for name, check in (('no include circle', lambda: check_circles(files, build)),
                        ('no stem shared by two folders', lambda: check_stems(files)),
                        ('no function in train/ or data/ over %d lines' % FUNC_LIMIT, lambda: check_functions(files)),
                        ('every code name of the docs exists, the README lists the public headers',
                         lambda: (check_docs(files, testbin), check_public_list(files))),
                        ('no exit or abort in library code', lambda: check_no_exit(files)),
                        ('no DT_CUDA dispatch outside core/', lambda: check_no_cuda_dispatch(files)),
                        ('libdeftc.so exports only dt_ symbols', lambda: check_exports(build)),
                        ('no host code compiled to exit by nvcc', lambda: check_exit_stubs(build))):
        before = len(problems)
        check()
        for p in problems[before:]:
            print('      ' + p)
        print('%s  tree: %s' % ('ok  ' if len(problems) == before else 'FAIL', name))
        failed += len(problems) != before
    print('%d passed, %d failed, 0 skipped' % (8 - failed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
