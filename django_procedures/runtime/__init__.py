"""The worker runtime: executor, heartbeat, wake-up listener, shutdown signals."""
