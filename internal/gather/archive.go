package gather

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Index is index.json, the archive's table of contents: what was collected from where, and
// what was not and why.
type Index struct {
	// CreatedAt is when the run started.
	CreatedAt time.Time `json:"createdAt"`
	// OctopusVersion is the version of the octopus binary that gathered.
	OctopusVersion string `json:"octopusVersion"`
	// Hub says how the hub was read.
	Hub string `json:"hub"`
	// Clusters are the clusters gathered, by ID (or kubeconfig when the ID is unknown).
	Clusters []ClusterSource `json:"clusters"`
	// Files lists every file of the archive but this one, sorted by path.
	Files []File `json:"files"`
	// Skipped lists what was not collected, and why.
	Skipped []Skip `json:"skipped,omitempty"`
	// Redaction says what was removed from every file.
	Redaction string `json:"redaction"`
}

// ClusterSource is one cluster gathered.
type ClusterSource struct {
	Name       string `json:"name"`
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`
}

// File is one file of the archive.
type File struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

// Skip is something not collected.
type Skip struct {
	What string `json:"what"`
	Why  string `json:"why"`
}

// redactionNote is Index.Redaction.
const redactionNote = "No Secret is ever read. Every file passed through the redaction of internal/gather/redact.go: " +
	"PEM private keys, JSON Web Tokens (every ServiceAccount token), bearer credentials, the values of token/privateKey/password-like " +
	"keys and environment variables, and managed fields are replaced by " + Redacted + "."

// archive writes one gzipped tar: every file under one top directory, redacted on the way in,
// and index.json last. Safe for concurrent use.
type archive struct {
	mu    sync.Mutex
	f     *os.File
	gz    *gzip.Writer
	tw    *tar.Writer
	root  string
	mtime time.Time
	index Index
	err   error
}

// createArchive creates <dir>/<name>.tar.gz, with every file under <name>/. It refuses to
// overwrite a file.
func createArchive(dir, name string, index Index) (*archive, string, error) {
	p := filepath.Join(dir, name+".tar.gz")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("creating the archive: %w", err)
	}
	gz := gzip.NewWriter(f)
	return &archive{f: f, gz: gz, tw: tar.NewWriter(gz), root: name, mtime: index.CreatedAt, index: index}, p, nil
}

// add redacts data and writes it as name (a slash-separated path under the top directory).
func (a *archive) add(name string, data []byte) {
	data = redactText(data)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return
	}
	a.err = a.write(name, data)
	if a.err == nil {
		a.index.Files = append(a.index.Files, File{Path: name, Bytes: len(data)})
	}
}

// skip records something not collected.
func (a *archive) skip(what string, why error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.index.Skipped = append(a.index.Skipped, Skip{What: what, Why: string(redactText([]byte(why.Error())))})
}

func (a *archive) write(name string, data []byte) error {
	hdr := &tar.Header{Name: path.Join(a.root, name), Mode: 0o600, Size: int64(len(data)), ModTime: a.mtime, Typeflag: tar.TypeReg}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("writing %s into the archive: %w", name, err)
	}
	if _, err := a.tw.Write(data); err != nil {
		return fmt.Errorf("writing %s into the archive: %w", name, err)
	}
	return nil
}

// close writes index.json and closes the archive. On an earlier write error it removes the
// incomplete file.
func (a *archive) close() (Index, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	slices.SortFunc(a.index.Files, func(x, y File) int { return strings.Compare(x.Path, y.Path) })
	slices.SortFunc(a.index.Skipped, func(x, y Skip) int { return strings.Compare(x.What, y.What) })
	err := a.err
	if err == nil {
		index, jerr := json.MarshalIndent(a.index, "", "  ")
		if jerr != nil {
			err = jerr
		} else {
			err = a.write("index.json", redactText(append(index, '\n')))
		}
	}
	err = errors.Join(err, a.tw.Close(), a.gz.Close(), a.f.Close())
	if err != nil {
		_ = os.Remove(a.f.Name())
	}
	return a.index, err
}
