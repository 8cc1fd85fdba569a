"""Check cloud files with the cloud tools' own code, as they would before launching anything:

    .tools-venv/bin/python scripts/cloud/check.py scripts/cloud/*.yaml

A SkyPilot task file goes through `sky.Task.from_yaml_config` (what `sky launch` and `sky exec`
parse it with), its required envs (null) given a placeholder first as `--env` does; a W&B sweep file
(one with a `method`) through the schema of W&B's sweep engine (the `sweeps` package). Prints one
JSON object per file, what the tool understood or its complaints, and exits 1 if any file was
rejected. Runs in the tools venv (`make tools`): neither tool is a project dependency.
"""

import json
import sys
import warnings

import yaml

PLACEHOLDER = "placeholder"


def check_task(config: dict) -> dict:
    import sky  # requirements-tools.txt, as sweeps: each check needs only its own

    required = [(key, PLACEHOLDER) for key, value in (config.get("envs") or {}).items()
                if value is None]
    task = sky.Task.from_yaml_config(config, env_overrides=required)
    return {
        "kind": "skypilot", "name": task.name, "envs": task.envs,
        "required_envs": [key for key, _ in required],
        "setup": task.setup, "run": task.run, "workdir": task.workdir,
        "accelerators": sorted(str(r.accelerators) for r in task.resources),
        "storage_mounts": {path: {"name": s.name, "mode": s.mode.value, "persistent": s.persistent}
                           for path, s in task.storage_mounts.items()},
        "file_mounts": task.file_mounts or {},
    }


def check_sweep(config: dict) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sweeps' models still name pydantic v1 config keys
        from sweeps.config import schema_violations_from_proposed_config

    violations = schema_violations_from_proposed_config(config)
    if violations:
        raise ValueError("; ".join(violations))
    return {"kind": "wandb-sweep", "method": config["method"], "metric": config["metric"],
            "parameters": sorted(config["parameters"]), "command": config.get("command")}


def main(paths: list[str]) -> int:
    rejected = 0
    for path in paths:
        with open(path) as f:
            config = yaml.safe_load(f)
        try:
            report = check_sweep(config) if "method" in config else check_task(config)
        except Exception as err:  # the tool's own complaint, whatever its type
            report, rejected = {"error": f"{type(err).__name__}: {err}"}, rejected + 1
        print(json.dumps({"file": path, **report}, default=str))
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
