"""Streams as Apache Iceberg tables, kept up to date by the pipeline.

`pipeline tables` (`job.py`, `append.py`) appends each stream's new messages to a table: Spark
executors read them from object storage with the data source's code and write Parquet data
files with pyiceberg's writer (`writing.py`); the driver commits them in one Iceberg
transaction whose snapshot summary records how far each stream got (`progress.py`), which is
what makes an append exactly once across crashes. `pipeline tables-upkeep` (`upkeep.py`)
compacts small data files and expires old snapshots, deleting the files only they referenced
(`expiry.py`); the erase job rewrites the data files holding erased messages (`erasing.py`,
copy-on-write) and expires the snapshots that still reference the old ones. `lag.py` tells the
agents' monitoring how far each table is behind its streams, from metadata alone.

The catalog is pyiceberg's SQL catalog (SQLite by default, PostgreSQL) or a REST catalog
(`config.py`); the tables' files lie in the object store beside the streams' objects, or
anywhere else pyiceberg's FileIO reaches.
"""
