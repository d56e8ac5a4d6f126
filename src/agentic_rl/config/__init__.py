"""Configuration: one typed dataclass per section (field docs inline), YAML + dotted overrides
(`parse`), the root `Config` (`schema`), loading (`load`) and the rules a config must pass
(`validate`, `validate_engines`, `validate_scale`)."""
