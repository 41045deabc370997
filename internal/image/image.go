// Package image builds OCI container images on this machine, without a registry or a
// container engine: from host files (binaries with their shared libraries, files of installed
// Debian packages) into one layer with a fixed timestamp, so the same inputs always give the
// same image digest. Octopus is the project's own image, which `make image` (hack/image) writes
// for users and the lab (internal/lab/images) imports into its nodes' containerd; images are
// written as docker-archive tarballs, which `docker load`, `podman load` and
// `ctr images import` read, and cached by their inputs.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// epoch is every timestamp in an image (file times, config creation): a fixed one makes the
// digest depend on content only.
var epoch = time.Unix(0, 0).UTC()

// File is one entry of an image's filesystem.
type File struct {
	// Path is the absolute path in the image. Required.
	Path string
	// Source is a host file whose content (symlinks followed) and permission bits the entry
	// gets. Exactly one of Source, Data and Link is set, or none for a directory.
	Source string
	// Data is the content of a regular file that is not on the host.
	Data []byte
	// Link makes the entry a symbolic link to Link.
	Link string
	// Mode overrides the permission bits (default: Source's, else 0644 for files and 0755 for
	// directories).
	Mode fs.FileMode
}

// Spec describes an image.
type Spec struct {
	// Refs are the names the image is tagged with, e.g. "docker.io/library/busybox:1.37".
	// At least one is required.
	Refs []string
	// Files make the image's single layer; parent directories are added as needed. A later
	// entry of the same path replaces an earlier one.
	Files []File
	// Entrypoint, Cmd, Env and WorkingDir go into the image config as in a Containerfile.
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
}

// Build makes the image of s. Its layer is gzip-compressed at the fastest level: the lab's
// images hold large Go binaries and are only ever unpacked on this machine.
func Build(s Spec) (v1.Image, error) {
	if len(s.Refs) == 0 {
		return nil, errors.New("building an image: no name given")
	}
	layerTar, err := layerTar(s.Files)
	if err != nil {
		return nil, fmt.Errorf("building image %s: %w", s.Refs[0], err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, fmt.Errorf("building image %s: layer: %w", s.Refs[0], err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("building image %s: %w", s.Refs[0], err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("building image %s: %w", s.Refs[0], err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = runtime.GOARCH
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Entrypoint = s.Entrypoint
	cfg.Config.Cmd = s.Cmd
	cfg.Config.Env = s.Env
	cfg.Config.WorkingDir = s.WorkingDir
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("building image %s: %w", s.Refs[0], err)
	}
	return img, nil
}

// Write builds the image of s and writes it to path as a docker-archive tarball tagged with
// every ref, via a temporary file so that path is complete whenever it exists.
func Write(path string, s Spec) error {
	img, err := Build(s)
	if err != nil {
		return err
	}
	refs := map[name.Reference]v1.Image{}
	for _, r := range s.Refs {
		tag, err := name.NewTag(r)
		if err != nil {
			return fmt.Errorf("image name %q: %w", r, err)
		}
		refs[tag] = img
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing image %s: %w", s.Refs[0], err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tarball.MultiRefWrite(refs, tmp); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing image %s to %s: %w", s.Refs[0], tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing image %s: %w", s.Refs[0], err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing image %s: %w", s.Refs[0], err)
	}
	return nil
}

// Ensure returns the tarball of s in cacheDir, building it when no tarball of the same inputs
// (the spec and each source file's content and permission bits, inputKey) is there yet. Rebuilding a
// binary thus makes a new image, and the tarballs of the image's earlier inputs are deleted:
// the project's image is rebuilt with every change of its binaries, and tarballs nobody can
// use again would fill the disk.
func Ensure(cacheDir string, s Spec) (string, error) {
	key, err := inputKey(s)
	if err != nil {
		return "", err
	}
	base := strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(s.Refs[0])
	path := filepath.Join(cacheDir, base+"-"+key+".tar")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("creating image cache %s: %w", cacheDir, err)
	}
	if err := Write(path, s); err != nil {
		return "", err
	}
	stale, err := filepath.Glob(filepath.Join(cacheDir, base+"-*.tar"))
	if err != nil {
		return "", err
	}
	for _, old := range stale {
		if old != path && len(old) == len(path) { // only <base>-<key>.tar, not another image's name
			_ = os.Remove(old)
		}
	}
	return path, nil
}

// inputKey hashes what an image is made of: the spec without the host paths of its files,
// and each host file's content and permission bits. Paths and modification times are left
// out on purpose: the lab's tests build the project's binaries into a fresh directory per
// run, and a key on paths made every lab bring-up build a new ~275 MB image that every node
// then pulled again; binaries built with -trimpath from the same source are the same bytes.
func inputKey(s Spec) (string, error) {
	if len(s.Refs) == 0 {
		return "", errors.New("building an image: no name given")
	}
	h := sha256.New()
	pathless := s
	pathless.Files = make([]File, len(s.Files))
	for i, f := range s.Files {
		f.Source = ""
		pathless.Files[i] = f
	}
	if err := json.NewEncoder(h).Encode(pathless); err != nil {
		return "", err
	}
	for _, f := range s.Files {
		if f.Source == "" {
			continue
		}
		sum, mode, err := contentHashes.of(f.Source)
		if err != nil {
			return "", fmt.Errorf("image %s: file %s: %w", s.Refs[0], f.Path, err)
		}
		fmt.Fprintf(h, "%s %s %o\n", f.Path, sum, mode)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// contentHashes remembers each host file's content hash for as long as the file's identity,
// size and modification time stay the same, so that a process bringing up many labs reads
// each binary once.
var contentHashes = &hashMemo{sums: map[fileStamp]string{}}

type fileStamp struct {
	path       string
	dev, ino   uint64
	size, time int64
}

type hashMemo struct {
	mu   sync.Mutex
	sums map[fileStamp]string
}

// of returns the SHA-256 of the content of path (symlinks followed) and its permission bits.
func (m *hashMemo) of(path string) (string, fs.FileMode, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, err
	}
	stamp := fileStamp{path: path, size: fi.Size(), time: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		stamp.dev, stamp.ino = uint64(st.Dev), st.Ino //nolint:unconvert // Dev's type differs between platforms
	}
	m.mu.Lock()
	sum, ok := m.sums[stamp]
	m.mu.Unlock()
	if ok {
		return sum, fi.Mode().Perm(), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", path, err)
	}
	sum = hex.EncodeToString(h.Sum(nil))
	m.mu.Lock()
	m.sums[stamp] = sum
	m.mu.Unlock()
	return sum, fi.Mode().Perm(), nil
}

// layerTar writes the files, sorted by path with every parent directory before its children,
// owned by root and dated epoch, so that equal inputs give equal bytes.
func layerTar(files []File) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("image path %q is not absolute", f.Path)
		}
		p := path.Clean(f.Path)
		if p == "/" {
			return nil, errors.New("image path / cannot be an entry")
		}
		f.Path = p
		byPath[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		if err := writeEntry(tw, byPath[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeEntry(tw *tar.Writer, f File) error {
	hdr := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), ModTime: epoch, Format: tar.FormatPAX}
	var data []byte
	switch {
	case f.Link != "":
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.Link, 0o777
	case f.Source != "":
		b, err := os.ReadFile(f.Source)
		if err != nil {
			return fmt.Errorf("reading %s for %s: %w", f.Source, f.Path, err)
		}
		fi, err := os.Stat(f.Source)
		if err != nil {
			return err
		}
		data = b
		hdr.Typeflag, hdr.Mode = tar.TypeReg, int64(fi.Mode().Perm())
	case f.Data != nil:
		data = f.Data
		hdr.Typeflag, hdr.Mode = tar.TypeReg, 0o644
	default:
		hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		hdr.Name += "/"
	}
	if f.Mode != 0 {
		hdr.Mode = int64(f.Mode.Perm())
	}
	hdr.Size = int64(len(data))
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", f.Path, err)
	}
	return nil
}

// Refs lists every name of the specs, for checks that a node has them all.
func Refs(specs []Spec) []string {
	var refs []string
	for _, s := range specs {
		refs = append(refs, s.Refs...)
	}
	return slices.Compact(refs)
}
