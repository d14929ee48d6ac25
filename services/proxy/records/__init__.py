"""A call's record: appended to its trial's JSONL, and a trial's end passed on to the other proxy pods."""
