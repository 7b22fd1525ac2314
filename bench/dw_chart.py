#!/usr/bin/env python3
"""The depthwise dilation chart (issue 38; docs/conv.md "Depthwise"): the JAX user's chart - time
against dilation, one panel per kernel size x channels - from the committed H200 logs of
2026-12-04, no GPU needed.

  python3 bench/dw_chart.py [CHART]   (CHART: the build/chart program; `make dw-chart` passes its)

Reads docs/logs/2026-12-04/e1_dw_lab_bf16.txt (build/depthwise_lab, bf16 NHWC, 1-D: batch 32,
output length 1024): per point the register-blocked kernels' (`rb`, the bf16 default) and the
old tiles' (`ship`) fwd + dgrad + wgrad ms, the floor of each pass (summed), and cuDNN's fwd +
bwd ms, which the lab copied from another device call of the day (c2: build/bench --what
depthwise beside bench/torch_depthwise.py, docs/logs/2026-12-04/c2_dw_bf16.txt; checked equal
here). Writes docs/logs/2026-12-04/depthwise_dilation.csv (panel,series,x,y: build/chart --lines'
rows) and, with CHART, draws docs/depthwise_dilation.png.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
LOGS = os.path.join(ROOT, 'docs', 'logs', '2026-12-04')
LAB = os.path.join(LOGS, 'e1_dw_lab_bf16.txt')
C2 = os.path.join(LOGS, 'c2_dw_bf16.txt')
CSV = os.path.join(LOGS, 'depthwise_dilation.csv')
PNG = os.path.join(ROOT, 'docs', 'depthwise_dilation.png')

SERIES = ('deftc bf16 register-blocked (the default): fwd+dgrad+wgrad',
          'deftc bf16 old tiles: fwd+dgrad+wgrad',
          'cuDNN bf16 fwd+bwd (PyTorch; another device call)',
          'floor: fwd+dgrad+wgrad bytes at 4210 GB/s or FMAs at 33.5 T/s (the larger)')
TITLE = ('1-D depthwise convolution on an NVIDIA H200, bf16 NHWC (fp32 accumulate), batch 32, output length 1024: '
         'forward + backward time against dilation, one panel per kernel size k and channels C (lower is better). '
         "deftc's kernels and the floor from build/depthwise_lab; cuDNN's times come from another device call of the "
         'same day (2026-12-04, docs/logs/2026-12-04/)')

SHAPE = r'k (\d+) C (\d+) d (\d+)'
PASS = re.compile(SHAPE + r'\s+(fwd|dgrad|wgrad)\s+.*\s(\d+\.\d+)$')
SUM = re.compile(SHAPE + r'\s+cuDNN fwd (\S+) f\+b (\S+) \| rb fwd \S+ f\+d\+w (\S+):.*\| ship fwd \S+ f\+d\+w (\S+)$')
C2ROW = re.compile(SHAPE + r'\s+' + r'\s+'.join([r'(\S+)'] * 10) + r'$')


def parse():
    """{(k, C, d): {series index: ms}} from the lab's log, cuDNN checked against c2's."""
    points, floors = {}, {}
    with open(LAB) as f:
        for line in f:
            line = line.rstrip()
            m = PASS.match(line)
            if m:
                key = tuple(int(v) for v in m.group(1, 2, 3))
                floors.setdefault(key, {})[m.group(4)] = float(m.group(5))
                continue
            m = SUM.match(line)
            if m:
                key = tuple(int(v) for v in m.group(1, 2, 3))
                _, cudnn_fb, rb, ship = (float(v) for v in m.group(4, 5, 6, 7))
                points[key] = {0: rb, 1: ship, 2: cudnn_fb}
    for key, fl in floors.items():
        if sorted(fl) != ['dgrad', 'fwd', 'wgrad'] or key not in points:
            sys.exit(f'dw_chart: {LAB}: k {key[0]} C {key[1]} d {key[2]}: passes {sorted(fl)}, summary line '
                     f'{"found" if key in points else "missing"}')
        points[key][3] = sum(fl.values())
    with open(C2) as f:  # cuDNN's times: the lab's are c2's
        for line in f:
            m = C2ROW.match(line.rstrip())
            if m:
                key = tuple(int(v) for v in m.group(1, 2, 3))
                if key in points and abs(float(m.group(11)) - points[key][2]) > 1e-9:
                    sys.exit(f'dw_chart: cuDNN f+b of k {key[0]} C {key[1]} d {key[2]}: lab {points[key][2]}, c2 {m.group(11)}')
    if len(points) != 4 * 3 * 8:
        sys.exit(f'dw_chart: {LAB}: {len(points)} 1-D points, the grid has 96')
    return points


def main():
    points = parse()
    with open(CSV, 'w') as f:
        f.write('# build/chart --lines rows (panel,series,x,y): x the dilation, y ms; written by bench/dw_chart.py '
                'from e1_dw_lab_bf16.txt (cuDNN: c2_dw_bf16.txt)\n')
        for k in (1, 4, 16, 64):
            for c in (32, 128, 512):
                for s, name in enumerate(SERIES):
                    for d in (1, 2, 4, 8, 16, 32, 64, 128):
                        f.write(f'k = {k}; C = {c},{name},{d},{points[(k, c, d)][s]:.4f}\n')
    print(f'dw_chart: {os.path.relpath(CSV, ROOT)}', flush=True)
    if len(sys.argv) > 1:
        subprocess.run([sys.argv[1], '--lines', CSV, PNG, TITLE, 'dilation', 'ms', '3'], check=True)
        print(f'dw_chart: {os.path.relpath(PNG, ROOT)}')


if __name__ == '__main__':
    main()
