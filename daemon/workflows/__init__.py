"""Workflows (docs/workflows.md): WorkRail's format, run the way WorkRail's v2 engine runs it.

- `definition`  the format as authored (pydantic);
- `validation`, `compiler`  WorkRail's structural checks and authoring passes (templateCall,
  features, refs, promptBlocks) -> `compiled.CompiledWorkflow`;
- `catalog`  the files of the bundled and the user's folders, skipped ones with reasons;
- `engine`  the pure engine: state + a continue_workflow call -> next step, blocked, or done;
  with `conditions` (the condition language), `gating` (output checks), `artifacts`
  (the contracts), `render` (what the agent sees) and `js` (JavaScript value semantics).
docs/workflows.md describes the format as WorkTrain runs it.

Pure: no Redis, no processes, no model.
May import: nothing else of `daemon`.
Must not import: every other subpackage (the bus, the tools and the agent use it).
"""

from daemon.workflows.catalog import Catalog, bundled_dir, load_catalog
from daemon.workflows.compiled import CompiledLoop, CompiledWorkflow
from daemon.workflows.compiler import WorkflowError, compile_workflow
from daemon.workflows.definition import LoopStep, ParallelStep, Workflow, WorkflowLimits, WorkflowStep

__all__ = [
    "Catalog",
    "CompiledLoop",
    "CompiledWorkflow",
    "LoopStep",
    "ParallelStep",
    "Workflow",
    "WorkflowError",
    "WorkflowLimits",
    "WorkflowStep",
    "bundled_dir",
    "compile_workflow",
    "load_catalog",
]
