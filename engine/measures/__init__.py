"""Measures of a representation from its features: health (RankMe, the top component's share, brightness
correlation) and the weighted kNN. The training monitor, the energy method and the probes all read them here."""
