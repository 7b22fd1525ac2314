#!/usr/bin/env python3
"""Per-kernel GPU time of one training step, from two ncu runs of the same job that differ by
one step (steps=S and steps=S+1): the difference of their per-kernel totals is exactly one
steady-state step, with no need to mark where a step begins.

    ncu --csv --metrics gpu__time_duration.sum --print-units base build/train ... steps=2 > a.csv
    ncu --csv --metrics gpu__time_duration.sum --print-units base build/train ... steps=3 > b.csv
    python3 bench/kernel_breakdown.py a.csv b.csv

Prints each kernel (grouped by name) with its launches and microseconds in that step, then the
totals by category, and the launches of relayout and cast kernels - the bf16 step's target is
none besides the input batch's conversion and the weights' once-per-step cast."""
import csv
import re
import sys
from collections import defaultdict


def load(path):
    totals, counts = defaultdict(float), defaultdict(int)
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own messages are not quoted
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = re.sub(r"\(.*", "", row["Kernel Name"]).strip()  # drop the argument list
        totals[name] += float(row["Metric Value"].replace(",", "")) / 1000.0  # ns -> us
        counts[name] += 1
    return totals, counts


CATEGORIES = [  # (category, pattern on the kernel name), first match wins
    ("relayout", r"nchw_to|nhwc_to|cnhw|transpose|relayout|convert_thin"),
    ("cast (convert)", r"convert|cast_chunks|f32_to_bf16|bf16_to_f32"),
    ("gemm (cuBLAS)", r"gemm|Gemm|sm90|cutlass|nvjet|xmma|ampere|Kernel2"),
    ("im2col / col2im", r"im2col|col2im"),
    ("batch norm", r"stats|bn_|k_apply|bwd_partial|bwd_dx|bwd_sums|sum_splits|bwd_params|batchnorm|nhwc_apply"),
    ("deformable", r"deform|sample|gather|index|offconv|offset|radix|scan|Radix|Scan|DeviceSort|Onesweep|_tc|_halo|"
                   r"db_parts|sum_parts|dw_|fwd_"),
    ("pooling", r"pool"),
    ("loss", r"xent|topk"),
    ("optimizer", r"sgd"),
    ("elementwise / other", r"."),
]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    (ta, ca), (tb, cb) = load(sys.argv[1]), load(sys.argv[2])
    step = {k: (tb[k] - ta.get(k, 0.0), cb[k] - ca.get(k, 0)) for k in tb}
    step = {k: v for k, v in step.items() if v[1] > 0}
    total = sum(v[0] for v in step.values())
    print(f"one step: {sum(v[1] for v in step.values())} kernel launches, {total / 1000:.3f} GPU-ms")
    print(f"{'kernel':<70} {'launches':>8} {'us':>10} {'share':>6}")
    for k, (us, n) in sorted(step.items(), key=lambda kv: -kv[1][0]):
        print(f"{k[:70]:<70} {n:8d} {us:10.1f} {100 * us / total:5.1f}%")
    by = defaultdict(lambda: [0.0, 0])
    for k, (us, n) in step.items():
        cat = next(c for c, p in CATEGORIES if re.search(p, k))
        by[cat][0] += us
        by[cat][1] += n
    print("\nby category")
    for c, (us, n) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        print(f"  {c:<22} {n:6d} launches {us / 1000:8.3f} ms {100 * us / total:5.1f}%")


if __name__ == "__main__":
    main()
