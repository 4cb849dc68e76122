"""verl RFC #7244's bias of per-turn-index normalisation, measured: the first-turn "take another turn" gap of each
per-turn estimator on synthetic batches, over a range of intermediate-reward means, beside the RFC's closed form.

    .venv/bin/python benchmarks/turn_index_bias.py [--batches 20] [--max-calls 3] [--continue-prob 0.5]

Prints the table of :func:`agl_lab.lab.turn_bias.turn_bias_table` (its docstring defines every column) as Markdown:
each estimator's bias (its gap − the true gap) with its 95% interval. The README's table is this script's output.
"""

from __future__ import annotations

import argparse
import time

from agl_lab.lab.turn_bias import ESTIMATORS, turn_bias_table


def markdown(table) -> str:
    """μ, the true gap, the RFC's closed form, GRPO's shrinkage, then each estimator's bias ± its half-width."""
    names = list(ESTIMATORS)
    lines = [
        "| intermediate mean μ | true gap Δ* | RFC closed form −Δ* | GRPO shrinkage −Δ*/n | "
        + " | ".join(f"{name} bias" for name in names)
        + " |",
        "|" + "---|" * (4 + len(names)),
    ]
    for row in table.to_dict("records"):
        cells = [f"{row['intermediate_mean']:+.2f}", _signed(row["true_gap"]), _signed(row["rfc_closed_form"]),
                 _signed(row["grpo_shrinkage"])]  # fmt: skip
        cells += [f"{_signed(row[f'{name} bias'])} ± {row[f'{name} ci']:.3f}" for name in names]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _signed(value: float) -> str:
    return f"{round(value, 3) + 0.0:+.3f}"  # a value that rounds to 0 reads +0.000, never -0.000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20, help="synthetic batches per mean (default 20)")
    parser.add_argument("--max-calls", type=int, default=3, help="calls a rollout may make (default 3)")
    parser.add_argument("--continue-prob", type=float, default=0.5, help="chance of another call (default 0.5)")
    args = parser.parse_args()
    start = time.perf_counter()
    table = turn_bias_table(batches=args.batches, max_calls=args.max_calls, continue_prob=args.continue_prob)
    print(markdown(table))
    print(
        f"\n{args.batches} batches of 64 prompts x 8 rollouts per mean, continue_prob {args.continue_prob}, "
        f"max_calls {args.max_calls}, intermediate rewards uniform in mu +- 0.5, outcome 1 with chance 0.5; "
        f"norm_adv_by_std_in_grpo=false; {time.perf_counter() - start:.0f} s"
    )


if __name__ == "__main__":
    main()
