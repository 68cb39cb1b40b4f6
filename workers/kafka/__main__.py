from etlstage_workers.kafka.cli import main

main()
