"""Per-item plans of the sharded stages, one module per stage (:mod:`.fetch`, :mod:`.parse`,
:mod:`.msa`, :mod:`.features`, helpers in :mod:`.common`); see :mod:`foldworks.shards.run`.

Each rule's code hash covers only its stage's module and :mod:`.common`
(``code_hash("fetch", "shards/stages/common", "shards/stages/fetch")``), so editing the features
planner restamps no fetched or parsed entry. This file is in no stage's hash: keep it code-free.
"""
