"""The one exception type for bad user input: a config key, its bad value, and what is valid."""


class ConfigError(ValueError):
    """Raised before anything is compiled when a config value cannot work."""

    def __init__(self, key: str, value: object, valid: str):
        self.key, self.value, self.valid = key, value, valid
        super().__init__(f"{key}={value!r} is invalid: {valid}")
