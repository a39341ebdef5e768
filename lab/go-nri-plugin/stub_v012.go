//go:build !nri_v080

// The stub of github.com/containerd/nri v0.12 (go.mod): three more events
// than v0.8's, each with a handler interface of its own.

package main

import (
	"context"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// stubEvents: every event this stub has a handler interface for (0x3fff).
const stubEvents = api.EventMask(0x3fff)

func (p *plugin) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, _, _ *api.LinuxResources) error {
	return p.act(ctx, 12, pod, nil)
}

func (p *plugin) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return p.act(ctx, 13, pod, nil)
}

// ValidateContainerAdjustment: the stub answers a handler's error as a
// rejection (ValidateContainerAdjustmentResponse reject, reason), with
// ttrpc status OK.
func (p *plugin) ValidateContainerAdjustment(ctx context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	return p.act(ctx, 14, req.GetPod(), req.GetContainer())
}

// runtimeNRIVersion: what the runtime's Configure said (NRI v0.12 runtimes
// send it) or the stub inferred from the runtime's name and version;
// "unknown" else.
func runtimeNRIVersion(s stub.Stub) string { return s.RuntimeNRIVersion() }
