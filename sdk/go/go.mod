module etlstage/worker

go 1.21
