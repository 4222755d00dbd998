"""The triggers file (README's Triggers): every problem said as `file:line: field: what`, read and
checked the way `web`, `worker`, `up` and `worktrain triggers --check` do.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main
from daemon.host.config import Settings
from daemon.triggers.loading import TriggerFileError, read_triggers
from daemon.triggers.setup import check_triggers
from tests.web.conftest import FIXTURE_WORKFLOWS

pytestmark = pytest.mark.unit  # the tier (tests/tiers.py on the tiers branch)

GOOD = """\
- id: fix-labelled-issues
  source: github
  mode: webhook
  events: [issues.labeled, issue_comment.created]
  filter: {label: agent, repo: acme/app}
  secretEnv: TEST_LOAD_SECRET
  tokenEnv: TEST_LOAD_TOKEN
  workflowId: two-step
  goal: "Fix #{{ issue.number }}: {{ issue.title }}"
  context: {issueUrl: "{{ issue.html_url }}"}
  workspacePath: WORKSPACE
  key: "issue-{{ issue.number }}"
  whileRunning: steer
  reportBack: comment
"""


def write(tmp: Path, text: str) -> Path:
    path = tmp / "triggers.yml"
    path.write_text(textwrap.dedent(text).replace("WORKSPACE", str(tmp / "repo")))
    return path


def problems_of(path: Path, env: dict[str, str] | None = None) -> list[str]:
    settings = Settings(data_dir=path.parent / "data", workflows_dir=FIXTURE_WORKFLOWS)
    lookup = (env or {}).get
    try:
        check_triggers(read_triggers(path, required=True), "check", ["two-step"], settings, lookup)
    except TriggerFileError as exc:
        return exc.lines()
    return []


ENV = {"TEST_LOAD_SECRET": "s", "TEST_LOAD_TOKEN": "t"}


def test_a_good_file_has_no_problem(tmp_path: Path) -> None:
    assert problems_of(write(tmp_path, GOOD), ENV) == []
    (trigger,) = list(read_triggers(write(tmp_path, GOOD)))
    assert trigger.spec.filter is not None and trigger.line == 1


def test_an_unknown_field_is_refused_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("  whileRunning: steer", "  whileRuning: steer"))
    assert problems_of(path, ENV) == [f"{path}:13: fix-labelled-issues.whileRuning: unknown field"]


def test_a_bad_template_is_refused_with_its_line(tmp_path: Path) -> None:
    path = write(
        tmp_path, GOOD.replace('"Fix #{{ issue.number }}: {{ issue.title }}"', '"Fix #{{ issue.number }"')
    )
    (line,) = problems_of(path, ENV)
    assert line.startswith(f"{path}:9: fix-labelled-issues.goal: bad template: ")
    nested = write(tmp_path, GOOD.replace('{issueUrl: "{{ issue.html_url }}"}', '{urls: {a: "{% if %}"}}'))
    (line,) = problems_of(nested, ENV)
    assert line.startswith(f"{nested}:10: fix-labelled-issues.context.urls.a: bad template")


def test_a_missing_secret_variable_is_refused_with_its_line_and_never_a_value(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    assert problems_of(path, {"TEST_LOAD_TOKEN": "t"}) == [
        f"{path}:6: fix-labelled-issues.secretEnv: the variable TEST_LOAD_SECRET is not set"
    ]
    assert problems_of(path, {"TEST_LOAD_SECRET": "s"}) == [
        f"{path}:7: fix-labelled-issues.tokenEnv: the variable TEST_LOAD_TOKEN is not set"
    ]


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    text = GOOD + textwrap.dedent("""\
    - id: poll-it
      source: github
      mode: poll
      events: [issues, merge_request]
      repo: acme/app
      interval: 5
      workflowId: nowhere
      goal: g
      workspacePath: relative/path
    - id: fix-labelled-issues
      source: gitlab
      mode: webhook
      events: [note]
      secretEnv: TEST_LOAD_SECRET
      workflowId: nowhere
      goal: g
      goal: h
      workspacePath: /
    """)
    lines = problems_of(write(tmp_path, text), ENV)
    said = "\n".join(lines)
    assert ":20: poll-it.interval: Input should be greater than or equal to 10" in said
    assert ":23: poll-it.workspacePath: must be an absolute path" in said
    assert ":31: fix-labelled-issues: 'goal' given twice" in said


def test_what_a_file_names_outside_itself(tmp_path: Path) -> None:
    text = GOOD.replace("workflowId: two-step", "workflowId: two-steps")
    path = write(tmp_path, text)
    assert problems_of(path, ENV) == [f"{path}:8: fix-labelled-issues.workflowId: no workflow 'two-steps'"]
    data_dir = write(tmp_path, GOOD.replace("WORKSPACE", str(tmp_path / "data" / "x")))
    (line,) = problems_of(data_dir, ENV)
    assert ":11: fix-labelled-issues.workspacePath: " in line and "data dir" in line


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("- id: x\n  source: github\n  mode: webhook\n  events: [issues\n", "not valid YAML"),
        ("id: x\n", "must be a list of triggers"),
        ("- !!python/object:os.system {}\n", "not valid YAML"),
        ("- id: Bad_Id\n", "Bad_Id.id: String should match pattern"),
        ("- 3\n", "#1: each trigger is a mapping"),
    ],
)
def test_what_is_not_a_triggers_file(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "triggers.yml"
    path.write_text(text)
    with pytest.raises(TriggerFileError) as caught:
        read_triggers(path)
    assert said in str(caught.value)
    assert str(path) in str(caught.value)


def test_no_file_is_no_trigger_unless_it_was_named(tmp_path: Path) -> None:
    assert len(read_triggers(tmp_path / "absent.yml")) == 0
    with pytest.raises(TriggerFileError, match="no such file"):
        read_triggers(tmp_path / "absent.yml", required=True)


def test_worktrain_triggers_check_says_the_same_offline(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("  whileRunning: steer", "  whileRuning: steer"))
    env = {
        "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
        "WORKTRAIN_DATA_DIR": str(tmp_path / "d"),
        **ENV,
    }
    bad = CliRunner().invoke(main, ["triggers", "--check", str(path)], env=env)
    assert bad.exit_code == 1
    assert f"{path}:13: fix-labelled-issues.whileRuning: unknown field" in bad.stderr
    good = CliRunner().invoke(main, ["triggers", "--check", str(write(tmp_path, GOOD))], env=env)
    assert good.exit_code == 0, good.output
    assert "1 trigger(s), no problem found" in good.stdout
    secret = "a-secret-value-never-printed"
    unset = CliRunner().invoke(
        main,
        ["triggers", "--check", str(path)],
        env={**env, "TEST_LOAD_TOKEN": "", "TEST_LOAD_SECRET": secret},
    )
    assert unset.exit_code == 1 and "TEST_LOAD_TOKEN is not set" in unset.stderr
    assert secret not in unset.output
