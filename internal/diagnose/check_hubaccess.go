package diagnose

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/octopus-mcs/octopus/api/v1alpha1"
	"github.com/octopus-mcs/octopus/internal/hubaccess"
)

var hubAccessCheck = check{
	Check:  Check{Name: "hub-access", Summary: "the hub answers, and every cluster's hub credential is accepted"},
	set:    checkHubKubeconfig,
	member: checkCredential,
}

// checkCredential reads the cluster's hub credential and makes one request with it: the
// read of its own Cluster, which every credential may make (internal/manifests/render/hubrbac.go).
func checkCredential(ctx context.Context, e *env, m *member) []Finding {
	cred, err := m.cred.get(ctx)
	switch {
	case errors.Is(err, hubaccess.ErrNotJoined):
		return []Finding{failure(fmt.Sprintf("run `%s`", m.rejoin()),
			"the cluster has not joined a hub: it has no Secret %s/%s, so no other check can reach the hub for it", v1alpha1.SystemNamespace, v1alpha1.CredentialSecretName)}
	case err != nil && credentialDamaged(err):
		return []Finding{failure(fmt.Sprintf("re-run `%s`", m.rejoin()), "the hub credential is damaged: %v", err)}
	case err != nil:
		return []Finding{notChecked("the hub credential", err, "versions")}
	}
	hc, err := m.hubc.get(ctx)
	if err != nil {
		return []Finding{failure(fmt.Sprintf("re-run `%s`", m.rejoin()), "no client can be made from the hub credential: %v", err)}
	}
	err = hc.Get(ctx, client.ObjectKey{Namespace: cred.Namespace, Name: cred.ClusterID}, &v1alpha1.Cluster{})
	if err != nil && !apierrors.IsNotFound(err) {
		return []Finding{hubProblem(err, cred.Server, m.rejoin())}
	}
	return []Finding{ok("the hub at %s accepts the cluster's credential (namespace %s)", hostOf(cred.Server), cred.Namespace)}
}

// checkHubKubeconfig checks the hub's own kubeconfig, when given, and that every cluster
// credential points at one hub.
func checkHubKubeconfig(ctx context.Context, e *env) []Finding {
	var out []Finding
	servers := map[string][]string{}
	for _, m := range e.members {
		if cred, err := m.cred.get(ctx); err == nil {
			servers[cred.Server] = append(servers[cred.Server], m.name())
		}
	}
	if e.hub.admin != nil {
		r, err := e.hub.reader.get(ctx)
		switch {
		case err != nil:
			out = append(out, aboutHub(hubProblem(err, e.hub.admin.Host, "")))
		case r.via != hubKubeconfig:
			// The reader fell back to a credential, so the kubeconfig was refused.
			out = append(out, aboutHub(failure("check the --hub-kubeconfig given", "the hub's kubeconfig is refused by %s", hostOf(e.hub.admin.Host))))
		default:
			out = append(out, aboutHub(ok("the hub's kubeconfig reaches %s (namespace %s, %d clusters registered)", hostOf(e.hub.admin.Host), r.namespace, len(r.clusters))))
		}
	}
	if len(servers) > 1 {
		var parts []string
		for server, names := range servers {
			slices.Sort(names)
			parts = append(parts, fmt.Sprintf("%s → %s", strings.Join(names, ", "), server))
		}
		slices.Sort(parts)
		out = append(out, failure("leave the hub that should not be used (`octopus leave`) and join the one that should",
			"the clusters' credentials point at different hubs (%s): clusters of different hubs never see each other", strings.Join(parts, "; ")))
	}
	return out
}

// credentialDamaged tells hub.LoadCredential's complaint about the Secret's content (a plain
// error, from hubaccess.CredentialFromSecret) from its failure to read the Secret (which wraps the
// client's error).
func credentialDamaged(err error) bool { return errors.Unwrap(err) == nil }

// hubKubeconfig is hubReader.via for the hub's own kubeconfig.
const hubKubeconfig = "the hub's kubeconfig"

// hubProblem explains an error of a request to the hub at server. rejoin is the command that
// issues a new credential; empty for the hub's own kubeconfig.
func hubProblem(err error, server, rejoin string) Finding {
	host := hostOf(server)
	fixCredential := "re-run `" + rejoin + "`"
	if rejoin == "" {
		fixCredential = "check the --hub-kubeconfig given"
	}
	var (
		verr      *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
	)
	switch {
	case apierrors.IsUnauthorized(err):
		return failure(fixCredential,
			"the hub at %s rejects the credential (401 Unauthorized): it was revoked (the cluster left, or its ServiceAccount on the hub was deleted), so the cluster's agent and gateway can no longer heartbeat, publish or read anything", host)
	case apierrors.IsForbidden(err):
		return failure(fixCredential,
			"the hub at %s accepts the credential but refuses it access (403 Forbidden): its RoleBinding to the %s Role is missing: %v", host, clusterRole, err)
	case errors.As(err, &verr), errors.As(err, &authority), errors.As(err, &hostname):
		return failure(fixCredential+" with a current broker-info",
			"the hub at %s presents a certificate that the CA in the credential does not verify (%v): the hub was redeployed or its certificate replaced", host, err)
	case isAPIStatus(err):
		return failure("look at the hub's API server", "the hub at %s refuses the request: %v", host, err)
	}
	return failure(fmt.Sprintf("start the hub's API server, or restore the network path from here to %s; then run `octopus diagnose hub-access` again", host),
		"the hub's API server at %s does not answer from this machine (%v): tunnels, routes and DNS keep working on their last state, but nothing new propagates (joins, exports, Peers of failed-over gateways) and heartbeats go unrecorded", host, err)
}

// clusterRole is the hub Role every cluster credential is bound to (internal/manifests/render/hubrbac.go).
const clusterRole = "octopus-cluster"
