"""What a compare of K boots a side can see on the CPU, by llmgate's own formula: the minimum
detectable effect (one-sided t-test on boot values, alpha 0.05, 80% power: analysis.verdict's
``_mde_log``, as ``judge_boots`` computes it) when the between-boot noise is the CPU prior
(``data/noise_prior.json``: ``noise_prior.assumed``), with the degrees of freedom ``boots_needed``
uses (the prior's, or 2(K - 1) where more), and the boots a side that reach a 25% MDE.

    python tests/validation/cpu_mde.py        (the table in docs/statistics.md, "One boot a side on the CPU")
"""

from llmgate.analysis import noise_prior
from llmgate.analysis.verdict import DEFAULT_ALPHA, _mde_log, _rel, boots_needed
from llmgate.core import metrics

ROWS = [metrics.DECODE_TOK_S, metrics.TTFT_P50, metrics.FRONTEND_TTFT, metrics.ENGINE_QUEUE]
KS = (1, 2, 3, 5)


def main() -> None:
    print(f"| metric | prior CV | {' | '.join(f'K = {k}' for k in KS)} | boots a side for 25% |")
    print(f"|---|---|{'---|' * len(KS)}---|")
    for m in ROWS:
        noise, source = noise_prior.assumed("cpu", m)
        var, df = noise.between, noise.df
        mdes = [_rel(m, _mde_log(var, max(df, 2 * (k - 1)), k, k, DEFAULT_ALPHA)) for k in KS]
        need = boots_needed(m, var, df, 1, 0.25, DEFAULT_ALPHA)
        cv = source.rsplit(" ", 1)[-1]
        print(f"| {m.label} ({m.better} is better) | {cv} | {' | '.join(f'{x:.0%}' for x in mdes)} | "
              f"{need if need is not None else 'more than 50'} |")


if __name__ == "__main__":
    main()
