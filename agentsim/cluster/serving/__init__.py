"""A serving instance and the collaborators it is given: batch state, admission (with its load
rules), prefetch and tool-gap movement. The instance (:mod:`.instance`) keeps only the batch
loop; each collaborator owns its own state and reaches the instance through a few named
attributes (see each module's docstring)."""
