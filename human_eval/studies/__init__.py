"""Study design: rubrics and their presets, the assignment of items to annotators, gold items,
creating a study from a run, planning its size, and exporting its ratings."""
