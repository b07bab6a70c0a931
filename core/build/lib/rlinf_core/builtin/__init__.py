"""The core's own plugin: a fast env (ReachEnv), tiny policies and a toy world model, registered like any plugin."""
