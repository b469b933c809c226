"""What a suite is: a benchmark run as the paper runs it, every part (a GLUE task, a SQuAD
version) x learning rate x seed a trial of one bertjax.sweep sweep, the rate chosen on dev
by the best median over seeds. command.py runs, resumes and reports any suite, report.py
holds what one found; a suite is a `SuiteKind` built once in its own module (glue/suite.py,
squad.py). Everything that differs between suites is here:

    name, title, part        the command's word and the report's files (glue), the name
                             people use (GLUE), what a row of the report is (task);
                             --PARTs names the parts to run, all of `parts` by default
    config, learning_rates   the trials' config file and the rates chosen among by default
    program, metric          what a trial runs (its sweep's program) and ranks by
    part_key, part_of(params)
                             the trial key that tells the part, and the part of a trial
    part_trials(parts, data_dir) -> hyper.Sweep
                             one trial per part: what tells one from another, its data
    data_overrides(data_dir) what every trial sets to read --data_dir (absolute, or tfds)
    is_config(config)        whether a config file is one of this suite's, by the Task
                             it trains (bertjax.tasks.for_config), never by its name
    check_data(data_dir, data_config, parts)
                             fails in one line on the first file a trial would read that
                             is not there (data_dir: --data_dir as given)
    read_scores(part, results, workdir) -> (scores, test files)
                             a finished trial's dev scores (x100) and test predictions
    score(part, scores)      what the rate is chosen by, or None
    score_column, score_keys(parts)
                             the CSV's columns: the chosen-by score's, then each score's
    table(suite), notes(suite), footer
                             the report's table (a header row first), the blocks of lines
                             under it, and the Markdown's last line
    plots                    whether the report plots each part's score against the rate
    submit(suite)            the test predictions' files (`submit` and the end of `run`), if any
    write_sample(folder, rows)
                             a made-up folder in the data's layout (`sample`), if any
"""

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class SuiteKind:
    name: str
    title: str
    part: str
    parts: tuple[str, ...]
    config: str
    learning_rates: tuple[str, ...]
    program: str
    metric: str
    part_key: str
    part_of: Callable[[dict], str]
    part_trials: Callable  # (parts, data_dir) -> hyper.Sweep
    data_overrides: Callable[[str], dict]
    is_config: Callable  # (ConfigDict) -> bool
    check_data: Callable[[str, dict, tuple[str, ...]], None]
    read_scores: Callable[[str, dict, str], tuple[dict, dict]]
    score: Callable[[str, dict], float | None]
    score_column: str
    score_keys: Callable[[tuple[str, ...]], list[str]]
    table: Callable  # (report.Suite) -> list[list[str]]
    notes: Callable  # (report.Suite) -> list[list[str]]
    footer: str = ""
    plots: bool = False
    submit: Callable | None = None  # (report.Suite) -> an object with .summary and .problems
    write_sample: Callable[[str, int], None] | None = None

    @property
    def parts_flag(self) -> str:
        return f"{self.part}s"
