// go-cri-resize on k8s.io/cri-api v0.36.3 (the cri-api of containerd
// 2.3.7 and CRI-O 1.36). Built by lab/go-cri-resize.sh.
module nri-trace-lab/go-cri-resize

go 1.26.0

require (
	golang.org/x/sys v0.40.0
	google.golang.org/grpc v1.79.3
	k8s.io/cri-api v0.36.3
)

require (
	golang.org/x/net v0.49.0 // indirect
	golang.org/x/text v0.33.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260128011058-8636f8732409 // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
)
