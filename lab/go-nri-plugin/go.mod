// go-nri-plugin on the stub of NRI v0.12.2 (go.v0.8.0.mod: on v0.8.0).
// Built by lab/go-nri-plugin.sh.
module nri-trace-lab/go-nri-plugin

go 1.24.0

require (
	github.com/containerd/nri v0.12.2
	github.com/containerd/ttrpc v1.2.7
	golang.org/x/sys v0.39.0
	google.golang.org/protobuf v1.34.1
)

require (
	github.com/containerd/log v0.1.0 // indirect
	github.com/golang/protobuf v1.5.3 // indirect
	github.com/knqyf263/go-plugin v0.9.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	github.com/tetratelabs/wazero v1.11.0 // indirect
	golang.org/x/mod v0.32.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20230731190214-cbb8c96f2d6d // indirect
	google.golang.org/grpc v1.57.1 // indirect
)
