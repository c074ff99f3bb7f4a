"""The transformers backend's decode paths (`model.decode`): one module per path behind one
interface (`base.DecodePath`), their names in `names` (which imports no torch: the settings schema
reads it) and each name's strategy in `paths`."""
