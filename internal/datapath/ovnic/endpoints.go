package ovnic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Endpoints are the IC databases ovn-ic connects to, in OVSDB's syntax ("ssl:host:port",
// comma separated for a raft cluster): its --ic-nb-db and --ic-sb-db.
//
// ovn-ic (23.03) reads them once, from its command line, and has no unixctl command to change
// them; the pod that runs it cannot mount kube-system's ovn-ic-config either. So the icmaster
// of each ovn-ic pod writes what ovn-ic-config says into an endpoints file in the pod's shared
// directory (WriteEndpointsFile), and the Supervisor that runs ovn-ic restarts it when the file
// changes: a changed ic-db-host, ic-nb-port or ic-sb-port reaches ovn-ic without re-creating
// the pod.
type Endpoints struct {
	NB string `json:"icNB"`
	SB string `json:"icSB"`
}

// Validate refuses endpoints ovn-ic could not use: empty, or an entry whose method is none of
// OVSDB's active ones (a typo would otherwise restart ovn-ic onto nothing).
func (e Endpoints) Validate() error {
	var errs []error
	for _, f := range []struct{ name, v string }{{"icNB", e.NB}, {"icSB", e.SB}} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("%s is empty", f.name))
			continue
		}
		for ep := range strings.SplitSeq(f.v, ",") {
			method, rest, ok := strings.Cut(ep, ":")
			if !ok || rest == "" || (method != "ssl" && method != "tcp" && method != "unix") {
				errs = append(errs, fmt.Errorf("%s: %q is not an OVSDB endpoint (ssl:HOST:PORT, tcp:HOST:PORT or unix:PATH)", f.name, ep))
			}
		}
	}
	return errors.Join(errs...)
}

// ParseEndpoints reads an endpoints file's content; unknown fields are refused, like
// ovn-ic-config's unknown keys, so that a file of another shape is not read as empty.
func ParseEndpoints(data []byte) (Endpoints, error) {
	var e Endpoints
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Endpoints{}, fmt.Errorf("reading IC endpoints: %w", err)
	}
	if err := e.Validate(); err != nil {
		return Endpoints{}, fmt.Errorf("IC endpoints: %w", err)
	}
	return e, nil
}

// WriteEndpointsFile writes e to path atomically (a temporary file in the same directory,
// renamed over path), so that the Supervisor never reads half a file. A file that already
// holds e is left alone: changed is false, and nothing restarts.
func WriteEndpointsFile(path string, e Endpoints) (changed bool, err error) {
	if err := e.Validate(); err != nil {
		return false, fmt.Errorf("writing %s: %w", path, err)
	}
	data, err := json.Marshal(e)
	if err != nil {
		return false, fmt.Errorf("encoding IC endpoints: %w", err)
	}
	data = append(data, '\n')
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return false, fmt.Errorf("writing IC endpoints: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err == nil {
		// Readable by ovn-ic's container, which may run as another user than the icmaster's.
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("writing IC endpoints to %s: %w", tmp.Name(), err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return false, fmt.Errorf("replacing %s: %w", path, err)
	}
	return true, nil
}
