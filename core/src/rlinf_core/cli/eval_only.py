"""``rlinf fit`` with a policy that cannot be trained (``Policy.eval_only``: a policy served elsewhere) is refused in
one line, before anything is built or connected."""

from __future__ import annotations

from typing import Any


def check_trainable_policy(cfg: dict[str, Any]) -> None:
    """``ValueError`` when ``model.init_args.policy`` names an eval-only policy class."""
    from rlinf_core.plugins.manager import PluginError, load_plugins

    model = cfg.get("model")
    args = model.get("init_args") if isinstance(model, dict) else None
    spec = args.get("policy") if isinstance(args, dict) else None
    class_path = spec.get("class_path") if isinstance(spec, dict) else None
    if not isinstance(class_path, str):
        return
    try:
        policy_class = load_plugins(warn=False).resolve("policy", class_path)
    except PluginError:
        return  # the class-path check names the choices
    if getattr(policy_class, "eval_only", False):
        raise ValueError(
            f"model.init_args.policy: {policy_class.__name__} is eval-only, it has no weights to train (a policy "
            "served elsewhere); evaluate it with `rlinf validate --config ...`"
        )
