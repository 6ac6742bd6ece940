"""The data pipeline on Spark: compaction, the janitor, export, and a Spark data source.

Jobs read and write the same objects and metadata as the agents, through the same library
code. The driver plans and commits (metadata transactions); executors move bytes (object GETs
and PUTs), reaching the stores by URL from `StoreOptions`.
"""
