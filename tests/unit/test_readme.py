"""The README's two lines are what CI and a new user run, its examples and those of docs/ print what they say, and
everything they point to is in the checkout. (The tour's shell commands run in
tests/integration/test_readme_walkthrough.py.)"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [REPO / "README.md", *DOCS]  # the README and the long reference it links to
PYTHON = (REPO / "docs" / "python.md").read_text()  # the library in Python, linked from the README
EVERYWHERE = "\n\n".join(page.read_text() for page in PAGES)  # what the README says or has moved to docs/


def _fenced(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


# A block that trains the main job's model runs after that job, in tests/integration/test_readme_walkthrough.py.
AFTER_THE_MAIN_JOB = "runs/tiny_cpu_gar"


def _examples(text: str) -> list[tuple[str, str]]:
    """Each python block followed directly by a text block: (code, what it prints), but those that need the main
    job's run."""
    found = re.findall(r"```python\n(.*?)```\n\n```text\n(.*?)```", text, re.S)
    return [(code, shown) for code, shown in found if AFTER_THE_MAIN_JOB not in code]


def _run(code: str, name: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, name, "exec"), {"__name__": "readme"})
    return out.getvalue()


def test_ci_runs_the_readme_test_line() -> None:
    line = next(b.strip() for b in _fenced("bash") if "pytest" in b)
    ci = (REPO / ".ci" / "run").read_text()
    assert f"{line} || status=$?" in ci


def test_the_main_job_line_names_shipped_files() -> None:
    line = next(b.strip() for b in _fenced("bash") if "whileai train" in b and b.startswith("pip install"))
    assert line.startswith("pip install torch==2.13.0 && ")  # a looser torch pulls a multi-GB CUDA build
    paths = re.findall(r"recipes/\S+", line)
    assert paths and all((REPO / path).is_file() for path in paths)


def test_a_newcomer_reaches_a_command_on_the_first_screen() -> None:
    """The first command within 40 lines, the main job's line within 50, the Python example with TRL within 90, the
    tour's spread verdict and a trained run within 150, no line over 400 characters."""
    lines = README.splitlines()

    def line_of(text: str, after: int = 0) -> int:
        return next(number for number, line in enumerate(lines, start=1) if number > after and text in line)

    assert line_of("```bash") <= 40
    assert line_of("&& whileai train recipes/tiny_cpu_gar.yaml") <= 50
    assert line_of("grading.trl_reward(verifier") <= 90
    tour = line_of("## A five-minute tour")
    assert line_of("spread: yes. The grader tells these passes apart.", after=tour) <= 150
    assert line_of("whileai: trained 60 steps; the run is in runs/tiny_cpu_binary", after=tour) <= 150
    assert max(len(line) for line in lines) <= 400


def test_quickstart_prints_what_the_readme_says() -> None:
    code, expected = next((c, e) for c, e in _examples(PYTHON) if "import whileai" in c)
    assert expected.startswith("spread check")  # the spread gate, then the TRL reward function
    assert _run(code, "README-quickstart") == expected


def test_every_python_example_prints_what_the_readme_shows() -> None:
    """Each python block followed by a text block, in the README and in docs/, prints exactly that text (torch
    examples need the train extra)."""
    import pytest

    counted = 0
    for page in PAGES:
        for number, (code, expected) in enumerate(_examples(page.read_text())):
            if "import torch" in code:
                pytest.importorskip("torch")
            assert _run(code, f"{page.name}-example-{number}") == expected, (page.name, number)
            counted += 1
    assert counted >= 5  # the quickstart, the four verdicts, the method's two, the estimators


def test_every_command_and_exit_code_is_in_the_readme() -> None:
    from whileai.cli.main import app

    for command in app.registered_commands:
        assert f"`whileai {command.name}" in README, command.name
    for code in (*range(5), 130, 143):
        assert f"| {code} |" in README


def test_every_file_the_readme_names_is_in_the_checkout() -> None:
    """A cloner has what the README and docs/ point to (the reference page is vendored under tests/spec/)."""
    assert "tests/spec/groupwise-grading.txt" in README
    pattern = r"(?<![\w/.])((?:recipes|configs|tests|benchmarks|core|cli|docs|\.ci)/[\w./-]+)"
    for page in PAGES:
        text = page.read_text()
        assert "../shared" not in text, page.name
        named = set(re.findall(pattern, text))
        missing = [p for p in sorted(named) if "*" not in p and not (REPO / p.rstrip(".")).exists()]
        assert not missing, (page.name, missing)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_link_leads_somewhere() -> None:
    """Every relative link and image of the README and docs/ names a file that exists, and a heading it has."""
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.is_file(), (page.name, target)
            if anchor and linked.suffix == ".md":
                assert anchor in _anchors(linked), (page.name, target)


def test_the_readme_links_every_page_of_docs() -> None:
    assert DOCS, "docs/ holds the long reference the README links to"
    for page in DOCS:
        assert f"](docs/{page.name}" in README, page.name


def test_the_readme_names_the_rule_file_s_fields_and_values_as_the_schema_does() -> None:
    from typing import get_args

    from whileai.grading.scripted import ScriptedRule

    sentence = " ".join(README.split("or a scripted rule file")[1].split(").")[0].split())
    named = set(re.findall(r"`(\w+)(?::[^`]*)?`", sentence)) | set(re.findall(r"`\w+: (\w+)`", sentence))
    fields = ScriptedRule.model_fields
    values = {v for name in ("measure", "order") for v in get_args(fields[name].annotation)}
    assert {"measure", "chars", "lines", "matches", "order", "descending"} <= named
    assert named <= set(fields) | values, named - set(fields) - values


def test_the_readme_says_where_output_dir_and_the_evaluation_prompts_stand(tmp_path: Path, monkeypatch) -> None:
    from whileai.config import load_recipe
    from whileai.errors import BadInput

    text = " ".join(EVERYWHERE.split())
    assert (
        "except `output_dir` and a local `model.name_or_path`, which are relative to the folder whileai runs in" in text
    )
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "rows.jsonl").write_text('{"prompt": "p"}\n')
    recipe = tmp_path / "recipes" / "r.yaml"
    recipe.write_text("data: {dataset: rows.jsonl}\noutput_dir: runs/r\n")
    monkeypatch.chdir(tmp_path)
    loaded = load_recipe(recipe)
    assert loaded.resolve(loaded.recipe.data.dataset) == tmp_path / "recipes" / "rows.jsonl"
    assert Path(loaded.recipe.output_dir).resolve() == tmp_path / "runs" / "r"
    from whileai.config.build import train_setup
    from whileai.training.plan import model_path

    (tmp_path / "models" / "m").mkdir(parents=True)
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / "models" / "m" / name).write_text("{}")
    real = load_recipe(REPO / "recipes" / "real_cpu_word_problems_gar.yaml", ["model.name_or_path=models/m"])
    assert model_path(train_setup(real)) == str(
        tmp_path / "models" / "m"
    )  # from where whileai runs, not beside the recipe
    # data.eval_prompts needs trainer.eval_strategy, and the eval sentence says so
    assert "`data.eval_prompts`, which TRL also evaluates while training and so need `trainer.eval_strategy`" in text
    recipe.write_text((REPO / "recipes" / "tiny_cpu_gar.yaml").read_text() + "\n")
    try:
        load_recipe(recipe, ["data.eval_prompts=4"])
    except BadInput as refused:
        assert "trainer.eval_strategy" in str(refused)
    else:
        raise AssertionError("data.eval_prompts without trainer.eval_strategy was accepted")


def test_the_readme_says_what_the_equation_3_guard_does_not_see() -> None:
    text = " ".join(PYTHON.split())
    assert "What is checked is the trainer's list of reward functions and its config, not what a function of" in text
    assert "`GroupwiseGRPOTrainer` puts nothing of yours between whileai and TRL" in text
