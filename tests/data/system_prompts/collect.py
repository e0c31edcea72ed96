"""How prompts.jsonl was collected (run once, by hand; not part of the test run).

Reads local git mirrors of permissively licensed agent-framework repositories (``git show COMMIT:PATH``)
and writes every system / tool-use prompt string of at least 200 characters from the files listed in
SOURCES to prompts.jsonl, one JSON object per line with its repository, path, commit, licence and the
key it was read from, and SOURCES.md (the table of sources and the licence notices). Each prompt is also written as the framework renders it at run time (``rendered``: only the
placeholders in RENDER filled, with the framework's own format) with hand labels of what changes per
request (``volatile``: each value, labelled "certain" or "counter"). The shipped text of every prompt
was read for literal volatile text (dates, times, ids) and had none: its digits are step numbers,
counts, limits, years in examples ("a 1979 interview", "as of 2021") and sample values.

    python tests/data/system_prompts/collect.py /path/to/mirrors tests/data/system_prompts
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys

import yaml

MIN_CHARS = 200
# (mirror dir, owner/name, licence, [paths])
SOURCES = [
    ("Aider-AI+aider", "Aider-AI/aider", "Apache-2.0",
     ["aider/coders/base_prompts.py", "aider/coders/editblock_prompts.py", "aider/coders/wholefile_prompts.py",
      "aider/coders/udiff_prompts.py", "aider/coders/patch_prompts.py", "aider/coders/architect_prompts.py",
      "aider/coders/ask_prompts.py", "aider/coders/context_prompts.py", "aider/coders/help_prompts.py",
      "aider/coders/editor_editblock_prompts.py", "aider/coders/editor_whole_prompts.py", "aider/prompts.py",
      "aider/watch_prompts.py"]),
    ("huggingface+smolagents", "huggingface/smolagents", "Apache-2.0",
     ["src/smolagents/prompts/code_agent.yaml", "src/smolagents/prompts/toolcalling_agent.yaml",
      "src/smolagents/prompts/structured_code_agent.yaml"]),
    ("SWE-agent+SWE-agent", "SWE-agent/SWE-agent", "MIT",
     ["config/default.yaml", "config/coding_challenge.yaml", "config/bash_only.yaml",
      "config/sweagent_0_7/07.yaml", "config/sweagent_0_7/07_thought_action_xml.yaml"]),
    ("crewAIInc+crewAI", "crewAIInc/crewAI", "MIT", ["lib/crewai/src/crewai/translations/en.json"]),
    ("camel-ai+camel", "camel-ai/camel", "Apache-2.0",
     ["camel/prompts/ai_society.py", "camel/prompts/code.py", "camel/prompts/evaluation.py",
      "camel/prompts/solution_extraction.py", "camel/prompts/translation.py", "camel/prompts/misalignment.py",
      "camel/prompts/role_description_prompt_template.py", "camel/prompts/video_description_prompt.py",
      "camel/prompts/object_recognition.py", "camel/prompts/image_craft.py"]),
    ("langchain-ai+open_deep_research", "langchain-ai/open_deep_research", "MIT",
     ["src/open_deep_research/prompts.py", "src/legacy/prompts.py"]),
    # MIT outside enterprise/ (its LICENSE); only openhands/ files are used
    ("All-Hands-AI+OpenHands", "All-Hands-AI/OpenHands", "MIT",
     [f"openhands/agenthub/codeact_agent/prompts/{name}.j2" for name in (
         "system_prompt", "system_prompt_interactive", "system_prompt_long_horizon", "system_prompt_tech_philosophy",
         "security_risk_assessment", "in_context_learning_example", "microagent_info", "additional_info")]),
    ("anthropics+anthropic-quickstarts", "anthropics/anthropic-quickstarts", "MIT",
     ["computer-use-demo/computer_use_demo/loop.py"]),
]
# What each framework puts into these placeholders at run time (read from its own code, for the fixed
# day 2026-12-01, a Tuesday), and the hand label of that value: "certain" (changes every request or
# day and nothing else in the sentence is an instruction), "counter" (changes per step, but it is an
# ordinal in an instruction), or absent (the value is configuration, stable across requests).
RENDER = {
    # open_deep_research utils.get_today_str(): datetime.now().strftime("%a %b %-d, %Y")
    ("langchain-ai/open_deep_research", "{date}"): ("Tue Dec 1, 2026", "certain"),
    ("langchain-ai/open_deep_research", "{today}"): ("Tue Dec 1, 2026", "certain"),
    # aider base_coder.get_platform_info(): "- Platform: ...\n- Shell: ...\n- Language: ...\n- Current date: %Y-%m-%d"
    ("Aider-AI/aider", "{platform}"): ("- Platform: Linux-6.8.0-49-generic-x86_64-with-glibc2.39\n- Shell: "
                                       "SHELL=/bin/bash\n- Language: en_US\n- Current date: 2026-12-01\n- The user "
                                       "is operating inside a git repository\n", "certain:2026-12-01"),
    # anthropic-quickstarts computer_use_demo/loop.py SYSTEM_PROMPT (an f-string)
    ("anthropics/anthropic-quickstarts", "{platform.machine()}"): ("x86_64", ""),
    ("anthropics/anthropic-quickstarts", "{datetime.today().strftime('%A, %B %-d, %Y')}"):
        ("Tuesday, December 1, 2026", "certain"),
    # smolagents update_plan_post_messages: remaining_steps = max_steps - step_number
    ("huggingface/smolagents", "{remaining_steps}"): ("7", "counter"),
    # crewAI planning observer: the 1-based number of the step just completed
    ("crewAIInc/crewAI", "{step_number}"): ("3", "counter"),
}
# crewAI Prompts._build_date_block() (inject_date=True, default date_format "%Y-%m-%d") appends this to
# the agent's system prompt; applied to the two agent system prompts of the set.
CREWAI_DATE_BLOCK = ("\n\nCurrent Date: 2026-12-01", "2026-12-01")
CREWAI_AGENT_SYSTEM = {"slices.lite_agent_system_prompt_with_tools", "slices.lite_agent_system_prompt_without_tools"}


# OpenHands memory.py: RuntimeInfo(date=str(datetime.now(timezone.utc).date()), working_dir=...), rendered by
# additional_info.j2 into the system message.
OPENHANDS_CONTEXT = {"repository_info": {"repo_name": "owner/repo", "repo_directory": "repo", "branch_name": "main"},
                     "runtime_info": {"date": "2026-12-01", "working_dir": "/workspace/project",
                                      "available_hosts": {}, "custom_secrets_descriptions": {}}}


def _render(repo: str, key: str, text: str) -> tuple[str, list[dict]]:
    """The prompt as the framework sends it (only the placeholders in RENDER filled) and its labels."""
    labels = []
    if repo == "All-Hands-AI/OpenHands" and key == "additional_info.j2":
        import jinja2

        text = jinja2.Template(text).render(**OPENHANDS_CONTEXT).strip()
        labels.append({"text": "2026-12-01", "label": "certain", "source": "{{ runtime_info.date }}"})
    for (r, placeholder), (value, label) in RENDER.items():
        if r != repo or placeholder not in text:
            continue
        text = text.replace(placeholder, value)
        kind, _, span = label.partition(":")
        if kind:
            labels.append({"text": span or value, "label": kind, "source": placeholder})
    if repo == "crewAIInc/crewAI" and key in CREWAI_AGENT_SYSTEM:
        text += CREWAI_DATE_BLOCK[0]
        labels.append({"text": CREWAI_DATE_BLOCK[1], "label": "certain", "source": "_build_date_block"})
    return text, labels



def _show(mirror: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", mirror, "show", f"{commit}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def _walk(obj, key=""):
    if isinstance(obj, str):
        yield key, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{key}.{k}" if key else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{key}[{i}]")


def _python_strings(source: str):
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.JoinedStr):
            segment = ast.get_source_segment(source, node.value) or ""
            if segment.startswith(('f"""', "f'''")):  # an f-string prompt, kept with its {expressions}
                yield getattr(node.targets[0], "id", "?"), segment[4:-3]
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Constant | ast.JoinedStr):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            name = getattr(target, "id", None) or getattr(target, "attr", "?")
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                yield name, node.value.value
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and getattr(node.func, "id", "") == "TextPrompt":
            yield f"TextPrompt@{node.lineno}", node.args[0].value


COPYRIGHT = {  # the copyright line of each MIT LICENSE (Apache-2.0 files carry none to copy)
    "crewAIInc/crewAI": "Copyright (c) 2025 crewAI, Inc.",
    "SWE-agent/SWE-agent": "Copyright (c) 2024 John Yang, Carlos E. Jimenez, Alexander Wettig, Shunyu Yao, "
                           "Karthik Narasimhan, Ofir Press",
    "langchain-ai/open_deep_research": "Copyright (c) 2025 LangChain",
    "anthropics/anthropic-quickstarts": "Copyright (c) 2023 Anthropic",
    "All-Hands-AI/OpenHands": "Copyright © 2025 (its LICENSE: MIT outside enterprise/; only openhands/ is used)",
}
MIT_TEXT = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated "
    "documentation files (the \"Software\"), to deal in the Software without restriction, including without "
    "limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the "
    "Software, and to permit persons to whom the Software is furnished to do so, subject to the following "
    "conditions:\n\nThe above copyright notice and this permission notice shall be included in all copies or "
    "substantial portions of the Software.\n\nTHE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, "
    "EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR "
    "PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, "
    "DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN "
    "CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.")


def sources_md(rows: list[dict]) -> str:
    """SOURCES.md: repository, licence, commit and file of every prompt, and the licence notices."""
    files: dict[tuple[str, str, str], dict[str, int]] = {}
    for r in rows:
        paths = files.setdefault((r["repo"], r["license"], r["commit"]), {})
        paths[r["path"]] = paths.get(r["path"], 0) + 1
    out = ["# Sources of the system prompts in prompts.jsonl", "",
           "Each line of `prompts.jsonl` is one prompt string copied verbatim (`text`) from the file and commit",
           "below (its `repo`, `path`, `commit`, `license` and `key` fields say where), plus `rendered`, a modified",
           "copy with only the run-time placeholders listed in `collect.py` filled in (as the Apache License asks,",
           "the change is stated here), and hand labels (`volatile`). Only MIT and Apache-2.0 repositories are",
           "used, as test data for ragcache's volatile-text lint. `collect.py` rebuilds both files from local",
           "mirrors of these commits.", "",
           "| repository | licence | commit | file | prompts |", "|---|---|---|---|---|"]
    for (repo, lic, commit), paths in files.items():
        out += [f"| [{repo}](https://github.com/{repo}) | {lic} | `{commit}` | `{path}` | {n} |"
                for path, n in paths.items()]
    out += ["", f"{len(rows)} prompts from {len(files)} repositories.", "", "## Licence notices", ""]
    for repo, lic, _ in files:
        out.append(f"- {repo}: " + ("licensed under the Apache License, Version 2.0 "
                                    "(http://www.apache.org/licenses/LICENSE-2.0), copyright its authors; distributed "
                                    "on an \"AS IS\" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND."
                                    if lic == "Apache-2.0" else f"MIT License, {COPYRIGHT[repo].rstrip('.')}."))
    out += ["", "The MIT License text of the MIT repositories above:", ""]
    out += [f"> {line}" if line else ">" for line in MIT_TEXT.split("\n")]
    return "\n".join(out) + "\n"


def main(root: str, out_dir: str) -> None:
    seen: set[str] = set()
    rows = []
    for mirror_dir, repo, licence, paths in SOURCES:
        mirror = f"{root}/{mirror_dir}/repo"
        commit = subprocess.run(["git", "-C", mirror, "rev-parse", "HEAD"], check=True, capture_output=True,
                                text=True).stdout.strip()
        for path in paths:
            text = _show(mirror, commit, path)
            if path.endswith((".yaml", ".yml")):
                items = _walk(yaml.safe_load(text))
            elif path.endswith(".json"):
                items = _walk(json.loads(text))
            elif path.endswith(".j2"):
                items = [(path.rsplit("/", 1)[-1], text)]
            else:
                items = _python_strings(text)
            for key, prompt in items:
                digest = hashlib.sha256(prompt.strip().encode()).hexdigest()
                if len(prompt.strip()) < MIN_CHARS or digest in seen:
                    continue
                seen.add(digest)
                rendered, labels = _render(repo, key, prompt.strip())
                rows.append({"id": f"{repo.split('/')[1]}:{path.rsplit('/', 1)[-1]}:{key}", "repo": repo,
                             "path": path, "commit": commit, "license": licence, "key": key,
                             "text": prompt.strip(), "rendered": rendered, "volatile": labels})
    with open(f"{out_dir}/prompts.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    with open(f"{out_dir}/SOURCES.md", "w", encoding="utf-8") as f:
        f.write(sources_md(rows))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
