// go-cri-resize: one CRI UpdatePodSandboxResources call, made with
// k8s.io/cri-api's generated client over grpc-go, as kubelet makes it for
// a pod-level resize (KEP-1287; cri-api v0.33 on). The lab's
// go-cri-client is built from Debian's cri-api 0.32, which lacks the
// method, and tonic's k8s-cri (the Rust driver's) too, so this call comes
// from the Go module proxy's cri-api. Built by lab/go-cri-resize.sh.
//
// It appends one truth::Truth::Cri record (lab/src/truth.rs) to -truth and
// exits 0 when the call succeeded.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podRef, outcome and criTruth are truth::PodRef, truth::Outcome and
// truth::Truth::Cri, fields in serde's order.
type podRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
	Attempt   uint32 `json:"attempt"`
	SandboxID string `json:"sandbox_id"`
}

type outcome struct {
	Kind    string  `json:"kind"`
	Code    *int32  `json:"code,omitempty"`
	Message *string `json:"message,omitempty"`
}

type criTruth struct {
	Source      string  `json:"source"`
	Method      string  `json:"method"`
	Pod         *podRef `json:"pod"`
	Container   *string `json:"container"`
	StartMonoNs uint64  `json:"start_mono_ns"`
	EndMonoNs   uint64  `json:"end_mono_ns"`
	StartWallNs uint64  `json:"start_wall_ns"`
	DeadlineMs  uint64  `json:"deadline_ms"`
	Outcome     outcome `json:"outcome"`
	Retry       uint32  `json:"retry"`
}

func clockNs(id int32) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		panic(err)
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

func fail(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "go-cri-resize: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	socket := flag.String("socket", "", "the runtime's CRI socket")
	truthPath := flag.String("truth", "", "truth file to append the call's record to")
	sandbox := flag.String("sandbox-id", "", "the pod sandbox to resize")
	name := flag.String("name", "", "the pod's name (for the truth record)")
	namespace := flag.String("namespace", "", "the pod's namespace")
	uid := flag.String("uid", "", "the pod's uid")
	cpuShares := flag.Int64("cpu-shares", 512, "the pod's new cpu shares")
	memory := flag.Int64("memory-bytes", 256<<20, "the pod's new memory limit")
	deadline := flag.Duration("deadline", 10*time.Second, "the call's deadline")
	flag.Parse()
	if *socket == "" || *truthPath == "" || *sandbox == "" {
		fail("-socket, -truth and -sandbox-id are required")
	}
	conn, err := grpc.NewClient("unix://"+*socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"))
	if err != nil {
		fail("dialing %s: %v", *socket, err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	// Connect first (Version), so the resize's clock is the call's alone.
	ctx, cancel := context.WithTimeout(context.Background(), *deadline)
	if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		fail("Version: %v", err)
	}
	cancel()

	startWall := clockNs(unix.CLOCK_REALTIME)
	startMono := clockNs(unix.CLOCK_MONOTONIC)
	ctx, cancel = context.WithTimeout(context.Background(), *deadline)
	_, callErr := rt.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{
		PodSandboxId: *sandbox,
		Resources: &runtimeapi.LinuxContainerResources{
			CpuShares:          *cpuShares,
			MemoryLimitInBytes: *memory,
		},
	})
	endMono := clockNs(unix.CLOCK_MONOTONIC)
	cancel()
	out := outcome{Kind: "ok"}
	if callErr != nil {
		st, _ := status.FromError(callErr)
		code, msg := int32(st.Code()), st.Message()
		out = outcome{Kind: "error", Code: &code, Message: &msg}
	}
	rec := criTruth{
		Source: "cri", Method: "UpdatePodSandboxResources",
		Pod:         &podRef{Name: *name, Namespace: *namespace, UID: *uid, SandboxID: *sandbox},
		StartMonoNs: startMono, EndMonoNs: endMono, StartWallNs: startWall,
		DeadlineMs: uint64(*deadline / time.Millisecond), Outcome: out,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // like serde_json
	if err := enc.Encode(rec); err != nil {
		fail("encoding the truth record: %v", err)
	}
	f, err := os.OpenFile(*truthPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		fail("opening %s: %v", *truthPath, err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		fail("writing %s: %v", *truthPath, err)
	}
	f.Close()
	if callErr != nil {
		fail("UpdatePodSandboxResources %s: %v", *sandbox, callErr)
	}
	fmt.Printf("UpdatePodSandboxResources %s: ok in %.1f ms\n", *sandbox, float64(endMono-startMono)/1e6)
}
