"""OpInfos: filled in by the op family's author."""
OPINFOS = []
