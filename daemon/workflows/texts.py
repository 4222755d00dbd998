# ruff: noqa: E501 -- WorkRail's texts, kept verbatim: one source line per line of theirs
"""WorkRail's fixed texts, copied from its source (MIT, commit 2d4fbf32), in one place.

The compiler's closed sets (`wr.features.*` in `feature-registry.ts`, `wr.refs.*` in
`ref-registry.ts`), and the system sections its renderer appends to a step's prompt (the
artifact contracts' instructions, the metrics footers). Where WorkRail names its own
tools, the text names WorkTrain's: the agent completes a step with `continue_workflow
{notes, context, artifacts}` (WorkRail's daemon calls the same thing `complete_step`).
"""

from __future__ import annotations

from typing import Any

ARTIFACTS_PARAM = "continue_workflow's `artifacts` parameter"

REFS: dict[str, str] = {
    "wr.refs.memory_usage": "\n".join([
        "If Memory MCP tools are available (memory_briefing, memory_store, memory_query):",
        "- Query Memory for relevant prior knowledge about this workspace before beginning work",
        "- After completing significant work, store key discoveries and decisions",
        "- Use descriptive topics and titles so future sessions can find them",
        "- Do not block on Memory failures — it is advisory, not load-bearing",
    ]),
    "wr.refs.memory_store": "\n".join([
        "If Memory MCP tools are available (memory_store):",
        "- Store the key findings from this phase with a descriptive topic and title",
        "- Include file paths, decisions made, and rationale",
        "- Do not block on Memory failures — continue regardless",
    ]),
    "wr.refs.memory_query": "\n".join([
        "If Memory MCP tools are available (memory_briefing, memory_query):",
        "- Check Memory for prior context relevant to this task",
        "- Use workspace-scoped queries to find related past work",
        "- Do not block on Memory failures — proceed without prior context if unavailable",
    ]),
    "wr.refs.notes_first_durability": "\n".join([
        "Durability rules (notes-first):",
        "- Use output.notesMarkdown as the primary durable record for every step",
        "- Keep execution truth in notes and explicit context variables, not in markdown sidecar files",
        "- Human-facing artifacts (review docs, plans) are for readability only — they are NOT required workflow memory",
        "- If a chat rewind occurs, the durable notes and context variables survive; sidecar files may not",
        "- Always record key decisions, findings, and rationale in notesMarkdown before advancing",
    ]),
    "wr.refs.synthesis_under_disagreement": "\n".join([
        "Synthesis rules when parallel outputs disagree:",
        "- Treat disagreement as first-class work — never handwave contradictory outputs",
        "- If 2+ parallel outputs flag the same issue at the same severity, treat it as validated",
        "- If the same issue is flagged at different severities, default to the higher severity unless the lower-severity position includes specific counter-evidence",
        "- If one output flags an issue and others are silent, investigate it but do not automatically block unless it is clearly critical",
        "- If one output says false positive and another says valid issue, require explicit main-agent adjudication in notes before finalization",
        "- If outputs show material disagreement, findings override any preliminary recommendation until the disagreement is reconciled",
        "- Document every resolved contradiction with its resolution rationale",
    ]),
    "wr.refs.parallelize_cognition_serialize_synthesis": "\n".join([
        "Parallelism rules:",
        "- Parallelize independent cognition: context gathering, hypothesis generation, audit routines, and reviewer families can run simultaneously",
        "- Serialize synthesis: merging parallel outputs, resolving contradictions, making canonical decisions, and writing final artifacts must happen sequentially by the main agent",
        "- Never let a parallel subagent finalize or commit to a canonical answer — the main agent owns synthesis and final decisions",
        "- Prefer one compact targeted bundle over multiple small sequential delegation moments",
        "- When spawning parallel executors, give each a clear, non-overlapping focus area",
    ]),
    "wr.refs.adversarial_challenge_rules": "\n".join([
        "Adversarial challenge rules:",
        "- Actively try to break the current leading position -- do not just look for confirming evidence",
        "- Construct the strongest case for a different answer: what would it look like if the current position is wrong and an alternative is right?",
        "- For each finding or conclusion, ask: what evidence would disprove this? Is that evidence missing or present?",
        "- If the challenge cannot materially weaken the position, the position is strengthened",
        "- If the challenge reveals a genuine weakness, it must be recorded as a finding and the position must be updated",
        "- Do not soften findings to avoid conflict — severity should reflect actual risk, not social comfort",
        "- Challenge severity inflation as well as severity deflation — false positives waste as much attention as false negatives",
        "- If 2+ independent challengers raise the same serious concern, treat it as blocking by default",
    ]),
}  # fmt: skip

# Each feature appends to a promptBlocks step's constraints, procedure and verify lists.
# An item is a string or a list of parts ({"kind": "ref", ...} resolved from REFS).
FEATURES: dict[str, dict[str, list[Any]]] = {
    "wr.features.memory_context": {
        "constraints": [[{"kind": "ref", "refId": "wr.refs.memory_usage"}]],
    },
    "wr.features.capabilities": {
        "constraints": [
            "Do not assume optional capabilities are available just because this workflow can use them.",
            "If delegation, web access, or another optional capability matters here, verify it through a real probe or attempt before relying on it.",
            "If a capability is unavailable, degrade explicitly instead of silently acting as if it existed.",
        ],
        "procedure": [
            "When an optional capability would materially affect the quality of this step, decide whether using it is worth it here.",
            "If you take a capability-dependent path, record the observation or attempt that justified it.",
            "If you skip delegation or another optional capability, keep going yourself and record why the fallback path is sufficient.",
        ],
        "verify": [
            "No capability-dependent path was taken without an explicit observation, probe, or attempted use.",
            "If a capability was unavailable or skipped, the fallback path and its limitation were made explicit.",
            "The main agent still owns synthesis and final judgment.",
        ],
    },
    "wr.features.subagent_guidance": {
        "constraints": [
            "Use the WorkRail Executor as the only subagent model. Do not refer to or rely on named Builder, Researcher, or other identities.",
            "The main agent owns strategy, decisions, synthesis, and final outputs. Subagents provide independent cognitive perspectives only.",
            [{"kind": "ref", "refId": "wr.refs.parallelize_cognition_serialize_synthesis"}],
        ],
        "procedure": [
            "When delegating to WorkRail Executors, provide each with a clear non-overlapping focus and the shared fact packet or context as primary truth.",
            "After receiving parallel subagent outputs, synthesize them yourself — do not let any single subagent output become the canonical answer without main-agent review.",
        ],
        "verify": [
            "All delegated outputs were synthesized by the main agent, not adopted verbatim.",
            "No subagent was given final decision authority over canonical findings, recommendations, or artifacts.",
        ],
    },
}  # fmt: skip


def _fenced(example: str) -> list[str]:
    return ["Canonical format:", "```json", example, "```"]


def _provide(kind: str) -> str:
    return f"Provide a {kind} artifact in {ARTIFACTS_PARAM}."


CONTRACT_INSTRUCTIONS: dict[str, list[str]] = {
    "wr.contracts.loop_control": [
        "Artifact contract: wr.contracts.loop_control",
        'Provide an artifact with kind: "wr.loop_control"',
        'Required field: decision ("continue" | "stop")',
        "Do NOT include loopId — the engine matches automatically",
        *_fenced('{ "artifacts": [{ "kind": "wr.loop_control", "decision": "stop" }] }'),
    ],
    "wr.contracts.coordinator_signal": [
        "Artifact contract: wr.contracts.coordinator_signal",
        _provide("wr.coordinator_signal"),
        'Required fields: signalKind ("progress"|"finding"|"data_needed"|"approval_needed"|"blocked"), payload (object).',
        *_fenced('{ "artifacts": [{ "kind": "wr.coordinator_signal", "signalKind": "finding", "payload": { "summary": "..." } }] }'),
    ],
    "wr.contracts.review_verdict": [
        "Artifact contract: wr.contracts.review_verdict",
        f"Provide a valid wr.review_verdict artifact in {ARTIFACTS_PARAM}.",
        "Required schema (verdict, confidence, findings, summary are mandatory):",
        '  verdict: "clean" | "minor" | "blocking"',
        '  confidence: "high" | "medium" | "low"',
        "  findings: array of { severity, summary, findingCategory? } plus any enrichment fields (empty array for clean verdicts)",
        "  summary: one-line overall verdict string",
        "Enrichment fields allowed on each finding (optional): file, startLine, endLine, causalLink, remediation",
        *_fenced(
            '{ "artifacts": [{ "kind": "wr.review_verdict", "verdict": "minor", "confidence": "medium", "findings": '
            '[{ "severity": "minor", "summary": "Missing null check", "findingCategory": "correctness", "file": '
            '"src/foo.ts", "startLine": 42, "causalLink": "PR removed the guard", "remediation": "Restore null '
            'check" }], "summary": "Minor issues found" }] }'
        ),
        'For a clean review with no findings use: "verdict": "clean", "findings": []',
    ],
    "wr.contracts.discovery_handoff": [
        "Artifact contract: wr.contracts.discovery_handoff",
        _provide("wr.discovery_handoff"),
        'Required fields: selectedDirection (string), designDocPath (string), confidenceBand ("high"|"medium"|"low"), keyInvariants (string[]), selectionTier ("strong_recommendation"|"provisional_recommendation"|"insufficient_signal").',
        "See the step prompt for the full schema.",
    ],
    "wr.contracts.gate_verdict": [
        "Artifact contract: wr.contracts.gate_verdict",
        _provide("wr.gate_verdict"),
        'Required fields: version (number, must be 1), verdict ("approved"|"rejected"|"uncertain"), confidence ("high"|"medium"|"low"), rationale (string, min 20 chars).',
        *_fenced('{ "artifacts": [{ "kind": "wr.gate_verdict", "version": 1, "verdict": "approved", "confidence": "high", "rationale": "Output meets all stated criteria." }] }'),
    ],
    "wr.contracts.shaping_handoff": [
        "Artifact contract: wr.contracts.shaping_handoff",
        _provide("wr.shaping_handoff"),
        "Required fields: version (number, must be 1), pitchPath (string), selectedShape (string), appetite (string), keyConstraints (string[]), rabbitHoles (string[]), outOfScope (string[]), validationChecklist (string[]).",
        *_fenced(
            '{ "artifacts": [{ "kind": "wr.shaping_handoff", "version": 1, "pitchPath": "/path/to/pitch.md", '
            '"selectedShape": "...", "appetite": "Small batch (1-2 days)", "keyConstraints": [], "rabbitHoles": [], '
            '"outOfScope": [], "validationChecklist": [] }] }'
        ),
    ],
    "wr.contracts.coding_handoff": [
        "Artifact contract: wr.contracts.coding_handoff",
        _provide("wr.coding_handoff"),
        "Required fields: version (number, must be 1), keyDecisions (string[]), knownLimitations (string[]), testsAdded (string[]), filesChanged (string[]).",
        "Optional fields: branchName (string), correctedAssumptions (array of {assumed, actual}).",
        *_fenced(
            '{ "artifacts": [{ "kind": "wr.coding_handoff", "version": 1, "keyDecisions": ["..."], '
            '"knownLimitations": [], "testsAdded": [], "filesChanged": ["path/to/file.ts"] }] }'
        ),
    ],
    # WorkRail's renderer has no entry for this contract (it shows the generic two lines);
    # WorkTrain validates it (quirk fix, docs/workflows.md), so it says what it checks.
    "wr.contracts.differentiation_handoff": [
        "Artifact contract: wr.contracts.differentiation_handoff",
        _provide("wr.differentiation_handoff"),
        'Required fields: version (1), schemaVersion ("1.0.0"), generatedAt (ISO date-time), evidenceFreshness ({oldestCapturedAt, newestCapturedAt}), validationChecklist (string[]), shapingHandoff (object containing rawIdea, problem, baseline, appetiteHint, noGosHints, constraints, evidenceTopK, defensibilityClaim).',
        "See the step prompt for the full schema.",
    ],
}  # fmt: skip


def contract_instructions(contract_ref: str) -> list[str]:
    return CONTRACT_INSTRUCTIONS.get(
        contract_ref,
        [f"Artifact contract: {contract_ref}", "Provide an artifact matching the contract schema"],
    )


_OUTCOME = (
    '- `metrics_outcome`: set to exactly one of these four strings -- no other values are valid: `"success"`, '
    '`"partial"`, `"abandoned"`, `"error"`. Do not describe what you did -- classify the outcome using only these values.'
)
_SHA_FOOTER = (
    "\n\n**METRICS (System):** This is a coding workflow. After each commit, pass `context: { metrics_commit_shas: "
    '["<sha1>", "<sha2>", ...] }` when advancing (via `continue_workflow`). Always send the FULL accumulated list '
    "of all SHAs from this session -- not just the new SHA. Context uses shallow merge: sending only new SHAs "
    "permanently loses earlier ones."
)
_CODING_FINAL = (
    "\n\n**METRICS (System):** This is the final step. Also report:\n" + _OUTCOME + "\n"
    "- `metrics_pr_numbers`: array of integer PR numbers (not URLs)\n"
    "- `metrics_files_changed`: integer count\n"
    "- `metrics_lines_added`: integer count\n"
    "- `metrics_lines_removed`: integer count\n\n"
    'Pass all of the above in `context: { metrics_commit_shas: [...], metrics_outcome: "success", ... }` when '
    "calling `continue_workflow`."
)
_REVIEW_FINAL = (
    "\n\n**METRICS (System):** This is the final step of a review workflow. Report:\n"
    "- `metrics_pr_numbers`: array of integer PR numbers reviewed (not URLs)\n" + _OUTCOME + "\n\n"
    'Call `continue_workflow` with `context: { metrics_pr_numbers: [123], metrics_outcome: "success" }`.'
)
_OUTCOME_FINAL = (
    "\n\n**METRICS (System):** This is the final step. Report:\n" + _OUTCOME + "\n\n"
    'Call `continue_workflow` with `context: { metrics_outcome: "success" }`.'
)


def metrics_footer(profile: str | None, is_last_step: bool) -> str:
    """WorkRail's `buildMetricsSection` (prompt-renderer.ts): `coding` on every step, the rest last."""
    if profile == "coding":
        return _SHA_FOOTER + (_CODING_FINAL if is_last_step else "")
    if not is_last_step:
        return ""
    if profile == "review":
        return _REVIEW_FINAL
    if profile in ("research", "design", "ticket"):
        return _OUTCOME_FINAL
    return ""


# --- the loop banner (prompt-renderer.ts `buildLoopContextBanner`) ----------------------------
# Its last line is WorkTrain's: WorkRail points at an "Ancestry Recap" WorkTrain does not add;
# the previous passes are earlier in the agent's own conversation.
LOOP_FIRST_PASS = "> This step is part of an iterative loop (up to {max} passes). After your work, a decision step determines whether another pass is needed.\n"
LOOP_LATER_PASS = "---\n**Progress: [{bar}] Pass {number} of {max}**\n\n**Scope**: {scope}\n\nYour previous work is earlier in this conversation. Build on it — do not repeat work already done.\n---\n\n"
SCOPE_SECOND_PASS = "Focus on what the first pass missed — do not re-litigate settled findings."
SCOPE_FINAL_PASS = (
    "FINAL PASS — verify prior amendments landed correctly. Only flag regressions or clearly missed issues."
)
SCOPE_MIDDLE_PASS = "Diminishing returns expected. Focus on gaps and regressions, not fresh territory."

# --- assessments (prompt-renderer.ts `formatAssessmentRequirements`) ------------------------
ASSESSMENT_KIND = 'Provide an artifact with kind: "wr.assessment"'
ASSESSMENT_ID = (
    'Set assessmentId: "{id}" on the artifact so the engine can match it to the correct assessment.'
)
ASSESSMENT_EXAMPLE = 'Canonical format:\n```json\n{{ "artifacts": [{{ "kind": "wr.assessment", "assessmentId": "{id}", "dimensions": {{ {key}: {value} }} }}] }}\n```'
ASSESSMENT_LEVELS = "Use only canonical dimension levels. If the engine rejects the artifact, correct the submitted levels instead of inventing new ones."

# --- parallel steps (prompt-renderer.ts) ------------------------------------------------------
# WorkTrain runs one agent per session and has no subagent tool: the procedure says to do
# each delegation's work in turn (WorkRail's says to spawn them with `spawn_agent`).
PARALLEL_BYPASSED = "# Parallel Subagent Spawning Phase (Bypassed)\n\nAll parallel delegations for this step evaluated their conditions to false, meaning no subagents need to be spawned.\n\nPlease immediately call `continue_workflow` to advance to the next step."
PARALLEL_HEADER = "# Parallel Subagent Spawning Phase\n\nThis phase lists independent pieces of work that WorkRail would hand to parallel subagents. WorkTrain runs one agent per session: do each one yourself, one after the other, keeping their findings apart.\n\n### Active Delegations\n\n"
PARALLEL_PROCEDURE = "\n\n---\n\n### Procedure\n1. Work through each delegation above in turn, with its goal and inputs.\n2. Write each one's findings down before you start the next.\n3. Once all are done, synthesize them yourself, then call `continue_workflow` to advance to the synthesis phase."
PARALLEL_DELEGATION = "#### Subagent {n}: {workflow}\n*   **Workflow ID to Spawn**: `{workflow}`\n*   **Goal**: {goal}\n{tools}*   **Target Input Parameters (Context)**:\n{inputs}"
