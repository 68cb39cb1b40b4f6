from etlstage_workers.spark.cli import run

run()
