// go-nri-plugin on the stub of NRI v0.8.0 (go build -modfile go.v0.8.0.mod -tags nri_v080).
// Built by lab/go-nri-plugin.sh.
module nri-trace-lab/go-nri-plugin

go 1.24.0

require (
	github.com/containerd/nri v0.8.0
	github.com/containerd/ttrpc v1.2.6-0.20240827082320-b5cd6e4b3287
	golang.org/x/sys v0.21.0
	google.golang.org/protobuf v1.34.1
)

require (
	github.com/containerd/log v0.1.0 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.3 // indirect
	github.com/opencontainers/runtime-spec v1.0.3-0.20220825212826-86290f6a00fb // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	golang.org/x/net v0.25.0 // indirect
	golang.org/x/text v0.15.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20230731190214-cbb8c96f2d6d // indirect
	google.golang.org/grpc v1.57.1 // indirect
	k8s.io/cri-api v0.25.3 // indirect
)
