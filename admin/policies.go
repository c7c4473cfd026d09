package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/brokerguard/brokerguard/registry"
)

// The policy routes show the registry's policy set, its version and history, and
// change it (registry.Registry.ApplyPolicies): a dry run, an apply and a rollback.
// The three changes are mutations: they need WithMutations' token and pass the same
// Host, cross-origin and body rules as a hold, and each, allowed or refused, reaches
// the audit hook. A dry run changes nothing but shows the whole policy set and the
// circuits' state, so it asks for the same authority.
//
//	GET  /api/policies           {"active": version, "history": [versions, newest first]}
//	POST /api/policies/dry-run   {"set": set}                                  -> plan
//	POST /api/policies/apply     {"set": set, "author", "reason", "expires_in"} -> version and plan
//	POST /api/policies/rollback  {"version": n, "author", "reason"}            -> version and plan

// maxPolicyBody bounds a policy change's body: a set with a few thousand overrides.
const maxPolicyBody = 1 << 20

// policyRoutes adds the policy routes to mux.
func (h *Handler) policyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/policies", h.getPolicies)
	mux.HandleFunc("POST /api/policies/{action}", h.changePolicies)
}

// Policies is the JSON of GET /api/policies.
type Policies struct {
	Active  registry.PolicyVersion   `json:"active"`
	History []registry.PolicyVersion `json:"history"`
}

// PolicyPlan is the JSON of a dry run, and of what an apply or rollback did.
type PolicyPlan struct {
	registry.PolicyPlan
	Destinations []PolicyPlanRow `json:"destinations"`
}

// PolicyPlanRow is one destination of a PolicyPlan, with its circuit's state named.
type PolicyPlanRow struct {
	registry.DestinationPlan
	State string `json:"state,omitempty"` // the live circuit's state
}

// PolicyResult is the JSON of an apply or a rollback.
type PolicyResult struct {
	Version registry.PolicyVersion `json:"version"`
	Plan    PolicyPlan             `json:"plan"`
}

// policyRequest is the body of a policy change.
type policyRequest struct {
	Set       *registry.PolicySet `json:"set"`
	Version   uint64              `json:"version"`
	Author    string              `json:"author"`
	Reason    string              `json:"reason"`
	ExpiresIn string              `json:"expires_in"`
}

func (h *Handler) getPolicies(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, Policies{Active: h.reg.Policies(), History: h.reg.PolicyHistory()})
}

func (h *Handler) changePolicies(w http.ResponseWriter, r *http.Request) {
	ev := AuditEvent{At: h.now(), Action: "policy-" + r.PathValue("action"), Remote: r.RemoteAddr, Status: http.StatusOK}
	out, err := h.policyChange(r, &ev)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{Status: http.StatusInternalServerError, Msg: err.Error()}
		}
		ev.Status, ev.Err = ae.Status, ae.Msg
		writeError(w, ae)
	} else {
		writeJSON(w, http.StatusOK, out)
	}
	h.report(r.Context(), ev)
}

func (h *Handler) policyChange(r *http.Request, ev *AuditEvent) (any, error) {
	action := r.PathValue("action")
	switch action {
	case "dry-run", "apply", "rollback":
	default:
		return nil, &apiError{Status: http.StatusNotFound, Field: "action",
			Msg: "action: unknown " + strconv.Quote(action) + "; want dry-run, apply or rollback"}
	}
	if err := h.guard(r, maxPolicyBody, true); err != nil {
		return nil, err
	}
	var req policyRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxPolicyBody+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, badField("body", "not a valid policy request: "+err.Error())
	}
	ev.Author, ev.Reason, ev.PolicyVersion = req.Author, req.Reason, req.Version
	if action != "rollback" && req.Set == nil {
		return nil, badField("set", "the policy set is required")
	}
	if action != "dry-run" && (req.Author == "" || req.Reason == "") {
		return nil, badField("reason", "author and reason are required")
	}
	var (
		v    registry.PolicyVersion
		plan registry.PolicyPlan
		err  error
	)
	switch action {
	case "dry-run":
		plan, err = h.reg.PlanPolicies(*req.Set)
		if err != nil {
			return nil, badField("set", err.Error())
		}
		return planView(plan), nil
	case "apply":
		ch := registry.PolicyChange{Set: *req.Set, Author: req.Author, Reason: req.Reason}
		if req.ExpiresIn != "" {
			d, perr := time.ParseDuration(req.ExpiresIn)
			if perr != nil || d <= 0 {
				return nil, badField("expires_in", "not a positive duration like 30m: "+strconv.Quote(req.ExpiresIn))
			}
			ch.Expires = h.now().Add(d)
		}
		v, plan, err = h.reg.ApplyPolicies(ch)
		if err != nil {
			return nil, badField("set", err.Error())
		}
	case "rollback":
		v, plan, err = h.reg.RollbackPolicies(req.Version, req.Author, req.Reason)
		if errors.Is(err, registry.ErrPolicyVersion) {
			return nil, &apiError{Status: http.StatusNotFound, Field: "version", Msg: "version: " + err.Error()}
		}
		if err != nil {
			return nil, badField("version", err.Error())
		}
	}
	ev.PolicyVersion = v.Version
	return PolicyResult{Version: v, Plan: planView(plan)}, nil
}

func planView(p registry.PolicyPlan) PolicyPlan {
	out := PolicyPlan{PolicyPlan: p, Destinations: []PolicyPlanRow{}}
	for _, d := range p.Destinations {
		row := PolicyPlanRow{DestinationPlan: d}
		if d.Live {
			row.State = d.State.String()
		}
		out.Destinations = append(out.Destinations, row)
	}
	return out
}
