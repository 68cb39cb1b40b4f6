module sdkbench

go 1.21

require etlstage/worker v0.0.0

replace etlstage/worker => ../../../sdk/go
