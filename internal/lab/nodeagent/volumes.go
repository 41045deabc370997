package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Volume sync: configMap, secret and projected volumes are rewritten when their sources
// change, as the kubelet does (CoreDNS's reload plugin relies on it); service account tokens
// are renewed well before they expire.
const (
	volumeResync       = 5 * time.Second
	tokenTTL           = time.Hour
	tokenRenewAfter    = tokenTTL / 2
	volumeCallDeadline = 10 * time.Second
)

// volumeDir is where a pod's volume is materialised; mountns.go bind-mounts it.
func (p *pod) volumeDir(name string) string { return filepath.Join(p.dir, "volumes", name) }

// checkVolumes rejects what the lab cannot do, before anything starts.
func checkVolumes(obj *corev1.Pod) error {
	for _, v := range obj.Spec.Volumes {
		switch {
		case v.EmptyDir != nil, v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil:
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ClusterTrustBundle != nil || s.PodCertificate != nil {
					return fmt.Errorf("volume %s: projected source not supported by the lab node agent (serviceAccountToken, configMap, secret and downwardAPI are)", v.Name)
				}
			}
		default:
			return fmt.Errorf("volume %s: only emptyDir, configMap, secret, downwardAPI and projected volumes are supported by the lab node agent", v.Name)
		}
	}
	return nil
}

// syncVolumes writes every volume's files; a source that is missing fails unless optional.
func (p *pod) syncVolumes(ctx context.Context, obj *corev1.Pod) error {
	var errs []error
	for _, v := range obj.Spec.Volumes {
		dir := p.volumeDir(v.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("volume %s: %w", v.Name, err)
		}
		files := map[string][]byte{}
		var err error
		switch {
		case v.EmptyDir != nil:
			continue
		case v.ConfigMap != nil:
			err = p.configMapFiles(ctx, obj.Namespace, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, files)
		case v.Secret != nil:
			err = p.secretFiles(ctx, obj.Namespace, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, files)
		case v.DownwardAPI != nil:
			err = downwardFiles(obj, p.ip.String(), v.DownwardAPI.Items, files)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.ConfigMap != nil:
					err = errors.Join(err, p.configMapFiles(ctx, obj.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, files))
				case s.Secret != nil:
					err = errors.Join(err, p.secretFiles(ctx, obj.Namespace, s.Secret.Name, s.Secret.Items, s.Secret.Optional, files))
				case s.DownwardAPI != nil:
					err = errors.Join(err, downwardFiles(obj, p.ip.String(), s.DownwardAPI.Items, files))
				case s.ServiceAccountToken != nil:
					err = errors.Join(err, p.tokenFile(ctx, obj, v.Name, s.ServiceAccountToken, files))
				}
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", v.Name, err))
			continue
		}
		if err := writeVolume(dir, files); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", v.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (p *pod) configMapFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool, files map[string][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, volumeCallDeadline)
	defer cancel()
	cm, err := p.agent.opts.Client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading ConfigMap %s/%s: %w", ns, name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return project(data, items, files)
}

func (p *pod) secretFiles(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool, files map[string][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, volumeCallDeadline)
	defer cancel()
	s, err := p.agent.opts.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && optional != nil && *optional {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Secret %s/%s: %w", ns, name, err)
	}
	return project(s.Data, items, files)
}

// project copies data into files: every key, or only items (key → path).
func project(data map[string][]byte, items []corev1.KeyToPath, files map[string][]byte) error {
	if len(items) == 0 {
		for k, v := range data {
			files[k] = v
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("key %s not found", it.Key)
		}
		files[it.Path] = v
	}
	return nil
}

func downwardFiles(obj *corev1.Pod, podIP string, items []corev1.DownwardAPIVolumeFile, files map[string][]byte) error {
	for _, it := range items {
		if it.FieldRef == nil {
			return fmt.Errorf("downward API file %s: only fieldRef is supported by the lab node agent", it.Path)
		}
		var v string
		switch it.FieldRef.FieldPath {
		case "metadata.labels":
			v = formatMap(obj.Labels)
		case "metadata.annotations":
			v = formatMap(obj.Annotations)
		default:
			var err error
			if v, err = fieldValue(obj, it.FieldRef.FieldPath, podIP); err != nil {
				return fmt.Errorf("downward API file %s: %w", it.Path, err)
			}
		}
		files[it.Path] = []byte(v)
	}
	return nil
}

func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return b.String()
}

// tokenFile requests a token for the pod's service account, bound to the pod, as the kubelet
// does for the kube-api-access volume; it is renewed after tokenRenewAfter.
func (p *pod) tokenFile(ctx context.Context, obj *corev1.Pod, volume string, s *corev1.ServiceAccountTokenProjection, files map[string][]byte) error {
	key := volume + "/" + s.Path
	p.mu.Lock()
	tok, ok := p.tokens[key]
	p.mu.Unlock()
	if !ok || time.Since(tok.issued) > tokenRenewAfter {
		ctx, cancel := context.WithTimeout(ctx, volumeCallDeadline)
		defer cancel()
		sa := obj.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		ttl := int64(tokenTTL / time.Second)
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &ttl,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: obj.Name, UID: obj.UID},
		}}
		if s.Audience != "" {
			req.Spec.Audiences = []string{s.Audience}
		}
		resp, err := p.agent.opts.Client.CoreV1().ServiceAccounts(obj.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("requesting a token for service account %s/%s: %w", obj.Namespace, sa, err)
		}
		tok = issuedToken{token: resp.Status.Token, issued: time.Now()}
		p.mu.Lock()
		p.tokens[key] = tok
		p.mu.Unlock()
	}
	files[s.Path] = []byte(tok.token)
	return nil
}

type issuedToken struct {
	token  string
	issued time.Time
}

// writeVolume makes dir hold exactly files: changed files are replaced by rename (a reader
// never sees half a file) and files no longer wanted are removed.
func writeVolume(dir string, files map[string][]byte) error {
	want := map[string]bool{}
	for rel, data := range files {
		clean := filepath.Clean(rel)
		if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
			return fmt.Errorf("file path %q leaves the volume", rel)
		}
		want[strings.SplitN(clean, "/", 2)[0]] = true
		path := filepath.Join(dir, clean)
		if old, err := os.ReadFile(path); err == nil && string(old) == string(data) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !want[e.Name()] {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// syncVolumesLoop keeps the pod's volumes current until ctx ends.
func (p *pod) syncVolumesLoop(ctx context.Context, obj *corev1.Pod) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(volumeResync):
		}
		if err := p.syncVolumes(ctx, obj); err != nil && ctx.Err() == nil {
			p.agent.opts.Log.Error(err, "Syncing volumes failed; retrying", "pod", p.key)
		}
	}
}
