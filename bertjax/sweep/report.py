"""What a sweep found: every trial with its overrides, status, metrics, time and goodput (the
share of its wall time that trained, bertjax.goodput); the best trial;
plots of the metric against each swept key and of every trial's training curves.

`python -m bertjax.sweep report DIR` prints the table and writes DIR/report/:
report.md, report.csv, metric_vs_KEY.png for each swept key and curves.png.
With several sweep directories (one per task, as the paper's GLUE protocol
runs them) it ends with the best trial of each.
"""

import csv
import dataclasses
import io
import math
import os

from bertjax import goodput
from bertjax import workdir as workdir_lib
from bertjax.sweep import figures as figures_lib
from bertjax.sweep import hyper, trial_queue
from bertjax.sweep import worker as worker_lib
from bertjax.sweep.definition import SweepDefinition
from data_pipeline import files


def rows(study, definition: SweepDefinition, metric: str = "") -> list[dict]:
    """One dict per trial of the sweep, by index; metrics from its workdir's results.json."""
    out = []
    for record in trial_queue.records(study):
        last = record.last
        workdir = last.user_attrs.get("workdir") or os.path.join(
            definition.sweep_dir, "trials", worker_lib.trial_name(record.index, record.params)
        )
        results = workdir_lib.read_results(workdir) if record.status != "queued" else {}
        name = metric or worker_lib.metric_name(definition, results)
        final = (results.get("eval") or {}).get(name)
        best = results.get("best") or {}
        out.append(
            {
                "index": record.index,
                "params": record.params,
                "status": record.status,
                "attempts": len(record.attempts),
                "metric": name,
                "final": final,
                "best": best.get(name),
                "best_step": best.get("step"),
                "minutes": record.seconds / 60,
                "goodput": goodput.productive_fraction(workdir) if results else None,
                "workdir": workdir,
                "error": last.user_attrs.get("error", "") if record.status == "failed" else "",
            }
        )
    return out


def best_row(table_rows: list[dict], mode: str) -> dict | None:
    scored = [r for r in table_rows if _finite(r["final"]) and r["status"] == "done"]
    if not scored:
        return None
    pick = max if mode == "max" else min
    return pick(scored, key=lambda r: r["final"])


def _finite(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _keys(table_rows: list[dict]) -> list[str]:
    keys = []
    for row in table_rows:
        keys += [k for k in row["params"] if k not in keys]
    return keys


def _cells(row: dict, keys: list[str]) -> list[str]:
    def number(value):
        return f"{value:.4f}" if _finite(value) else "-"

    best = number(row["best"])
    if row["best_step"] is not None and best != "-":
        best += f" @{row['best_step']}"
    return [
        str(row["index"]),
        *(worker_lib.format_value(row["params"][k]) if k in row["params"] else "" for k in keys),
        row["status"] + (f" ({row['attempts']} runs)" if row["attempts"] > 1 else ""),
        number(row["final"]),
        best,
        f"{row['minutes']:.1f}",
        f"{row['goodput']:.0%}" if _finite(row["goodput"]) else "-",
    ]


def _header(table_rows: list[dict], keys: list[str]) -> list[str]:
    metric = next((r["metric"] for r in table_rows if r["metric"]), "metric")
    return ["trial", *keys, "status", f"final {metric}", f"best {metric}", "minutes", "goodput"]


def table(table_rows: list[dict], definition: SweepDefinition) -> str:
    """The terminal table, with the best trial below it."""
    keys = _keys(table_rows)
    lines = [_header(table_rows, keys)] + [_cells(r, keys) for r in table_rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    text = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    text += [f"trial {r['index']}: {r['error']}" for r in table_rows if r["error"]]
    text.append(_best_line(table_rows, definition.mode))
    return "\n".join(text)


def _best_line(table_rows: list[dict], mode: str) -> str:
    best = best_row(table_rows, mode)
    if best is None:
        return "best: none yet (no trial has finished with a metric)"
    overrides = " ".join(f"{k}={worker_lib.format_value(v)}" for k, v in best["params"].items())
    return f"best: trial {best['index']} ({overrides}): {best['metric']} {best['final']:.4f}, {best['workdir']}"


def markdown(table_rows: list[dict], definition: SweepDefinition) -> str:
    keys = _keys(table_rows)
    header = _header(table_rows, keys)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cells(r, keys)) + " |" for r in table_rows]
    return "\n".join(lines) + "\n\n" + _best_line(table_rows, definition.mode) + "\n"


def csv_text(table_rows: list[dict]) -> str:
    keys = _keys(table_rows)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["trial", *keys, "status", "attempts", "metric", "final", "best",
                     "best_step", "minutes", "goodput", "workdir", "error"])  # fmt: skip
    for r in table_rows:
        writer.writerow(
            [
                r["index"],
                *(r["params"].get(k, "") for k in keys),
                r["status"],
                r["attempts"],
                r["metric"],
                r["final"],
                r["best"],
                r["best_step"],
                f"{r['minutes']:.2f}",
                "" if r["goodput"] is None else f"{r['goodput']:.4f}",
                r["workdir"],
                r["error"],
            ]  # fmt: skip
        )
    return out.getvalue()


def metric_figures(table_rows: list[dict], definition: SweepDefinition) -> dict:
    """{key: figure} for each swept key: every finished trial's final metric against its value."""
    plt = figures_lib.pyplot()
    figures = {}
    done = [r for r in table_rows if _finite(r["final"])]
    for key in _keys(table_rows):
        points = [(r["params"][key], r["final"]) for r in done if key in r["params"]]
        if not points:
            continue
        fig, ax = plt.subplots(figsize=(5, 3.5))
        values = [v for v, _ in points]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            ax.scatter(values, [m for _, m in points])
            part = definition.space.get(key)
            spread = max(values) / min(values) if min(values) > 0 else 1
            if (isinstance(part, hyper.Range) and part.log) or spread >= 10:
                ax.set_xscale("log")
        else:
            labels = sorted({str(v) for v in values})
            ax.scatter([labels.index(str(v)) for v in values], [m for _, m in points])
            ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel(key)
        ax.set_ylabel(f"final {done[0]['metric']}")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        figures[key] = fig
    return figures


def curves_figure(table_rows: list[dict]):
    """Train loss and the eval metric against the step, one line per trial; None if no
    trial has logged yet."""
    plt = figures_lib.pyplot()
    curves = []
    for r in table_rows:
        metrics = workdir_lib.read_metrics(r["workdir"])
        if metrics:
            curves.append((r, metrics))
    if not curves:
        return None
    fig, (train_ax, eval_ax) = plt.subplots(1, 2, figsize=(10, 3.8))
    for r, metrics in curves:
        train = [
            (m["step"], m["loss"]) for m in metrics if m.get("split") == "train" and "loss" in m
        ]
        evals = [
            (m["step"], m[r["metric"]])
            for m in metrics
            if m.get("split") == "eval" and _finite(m.get(r["metric"]))
        ]
        label = f"{r['index']}"
        if train:
            train_ax.plot(*zip(*train, strict=True), label=label)
        if evals:
            eval_ax.plot(*zip(*evals, strict=True), marker="o", label=label)
    train_ax.set(xlabel="step", ylabel="train loss", title="training loss")
    metric = next((r["metric"] for r, _ in curves if r["metric"]), "metric")
    eval_ax.set(xlabel="step", ylabel=f"eval {metric}", title=f"eval {metric}")
    for ax in (train_ax, eval_ax):
        ax.grid(alpha=0.3)
    eval_ax.legend(title="trial", fontsize="small", ncol=2)
    fig.tight_layout()
    return fig


def write(table_rows: list[dict], definition: SweepDefinition, out_dir: str) -> list[str]:
    """report.md, report.csv and the plots in `out_dir` (local); the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    md, csv_file = os.path.join(out_dir, "report.md"), os.path.join(out_dir, "report.csv")
    files.atomic_write(md, markdown(table_rows, definition))
    files.atomic_write(csv_file, csv_text(table_rows))
    figures = {
        f"metric_vs_{k.replace('.', '_')}": f
        for k, f in metric_figures(table_rows, definition).items()
    }
    figures["curves"] = curves_figure(table_rows)
    return [md, csv_file, *figures_lib.save(figures, out_dir)]


def load(sweep_dir: str, storage: str, study_name: str):
    """(study, SweepDefinition) of the sweep in `sweep_dir` (or `storage`)."""
    return trial_queue.load(trial_queue.storage_url(sweep_dir, storage), study_name, heartbeat_s=60)


def report(sweep_dirs: list[str], storage: str, study_name: str, metric: str, mode: str) -> str:
    """The text `bertjax.sweep report` prints; writes each DIR/report/."""
    sections, bests = [], []
    for sweep_dir in sweep_dirs:
        study, definition = load(sweep_dir, storage, study_name)
        if mode:
            definition = dataclasses.replace(definition, mode=mode)
        table_rows = rows(study, definition, metric)
        out_dir = os.path.join(sweep_dir, "report") if "://" not in sweep_dir else "report"
        written = write(table_rows, definition, out_dir)
        sections.append(
            f"{sweep_dir} ({definition.config_flag})\n{table(table_rows, definition)}\n"
            f"written: {', '.join(written)}"
        )
        bests.append((definition, best_row(table_rows, definition.mode)))
    if len(sweep_dirs) > 1:
        lines = ["best trial of each sweep:"]
        for definition, best in bests:
            found = "none finished"
            if best is not None:
                found = (
                    " ".join(f"{k}={worker_lib.format_value(v)}" for k, v in best["params"].items())
                    + f": {best['metric']} {best['final']:.4f}"
                )
            lines.append(f"  {definition.config_flag}: {found}")
        sections.append("\n".join(lines))
    return "\n\n".join(sections)
