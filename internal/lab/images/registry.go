package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registry serves images over the OCI distribution API from memory, so that a container
// runtime configured with it as the mirror of every registry the images name (HostsTOML)
// can pull them as from their usual registries: a pod whose image is :latest, which a
// kubelet pulls always, starts as it would in a cluster, and nothing is fetched from outside
// the machine. Every image is served under its registry's name as a path prefix:
// docker.io/library/busybox:1.37 is <registry>/docker.io/library/busybox:1.37.
type Registry struct {
	// Addr is where the registry listens (plain HTTP).
	Addr string
	srv  *http.Server
	done chan struct{}
}

// StartRegistry serves an empty registry on ln until Close, with its blobs in files under
// blobDir (a lab's images are hundreds of megabytes, which the process serving them should not
// hold in memory).
func StartRegistry(ln net.Listener, blobDir string) *Registry {
	r := &Registry{
		Addr: ln.Addr().String(),
		srv: &http.Server{
			Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)),
				registry.WithBlobHandler(registry.NewDiskBlobHandler(blobDir))),
			ReadHeaderTimeout: 10 * time.Second,
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return r
}

// Close stops serving.
func (r *Registry) Close() error {
	err := r.srv.Close()
	<-r.done
	return err
}

// RegistryHosts lists the registries the specs' images name, sorted, as a container runtime
// names them (docker.io, not index.docker.io): those a node must use the lab's registry for.
func RegistryHosts(specs []Spec) ([]string, error) {
	var hosts []string
	for _, s := range specs {
		for _, ref := range s.Refs {
			tag, err := name.NewTag(ref)
			if err != nil {
				return nil, fmt.Errorf("image name %q: %w", ref, err)
			}
			if h := runtimeHost(tag.RegistryStr()); !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
	}
	slices.Sort(hosts)
	return hosts, nil
}

// runtimeHost is the name a container runtime gives a registry: go-containerregistry calls
// Docker Hub index.docker.io, containerd docker.io.
func runtimeHost(registry string) string {
	if registry == name.DefaultRegistry {
		return "docker.io"
	}
	return registry
}

// Push stores every image of a docker-archive tarball (Write) under each of its tags.
func (r *Registry) Push(ctx context.Context, tarballPath string) error {
	opener := func() (io.ReadCloser, error) { return os.Open(tarballPath) }
	manifest, err := tarball.LoadManifest(opener)
	if err != nil {
		return fmt.Errorf("reading %s: %w", tarballPath, err)
	}
	for _, d := range manifest {
		for _, t := range d.RepoTags {
			tag, err := name.NewTag(t)
			if err != nil {
				return fmt.Errorf("%s: tag %q: %w", tarballPath, t, err)
			}
			img, err := tarball.Image(opener, &tag)
			if err != nil {
				return fmt.Errorf("%s: image %s: %w", tarballPath, t, err)
			}
			host := runtimeHost(tag.RegistryStr())
			if err := r.put(ctx, host+"/"+tag.RepositoryStr(), tag.TagStr(), img); err != nil {
				return fmt.Errorf("pushing %s to the lab's registry: %w", t, err)
			}
		}
	}
	return nil
}

// Tag serves the image the registry holds as ref (registry/repository:tag) under tag too, as
// `docker tag` and a push would: the manifest is stored again, the blobs are shared. A node
// that pulls the new tag fetches no layer it already has.
func (r *Registry) Tag(ctx context.Context, ref, tag string) error {
	src, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("tagging %s: %w", ref, err)
	}
	dst, err := name.NewTag(src.Repository.Name() + ":" + tag)
	if err != nil {
		return fmt.Errorf("tagging %s as %s: %w", ref, tag, err)
	}
	repo := "/v2/" + runtimeHost(src.RegistryStr()) + "/" + src.RepositoryStr() + "/manifests/"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Addr+repo+src.TagStr(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", strings.Join([]string{
		string(types.OCIManifestSchema1), string(types.DockerManifestSchema2), string(types.OCIImageIndex), string(types.DockerManifestList),
	}, ", "))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reading the manifest of %s: %w", ref, err)
	}
	defer resp.Body.Close()
	manifest, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading the manifest of %s: %w", ref, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading the manifest of %s: %s: %s", ref, resp.Status, bytes.TrimSpace(manifest))
	}
	if err := r.do(ctx, http.MethodPut, repo+dst.TagStr(), resp.Header.Get("Content-Type"), bytes.NewReader(manifest)); err != nil {
		return fmt.Errorf("tagging %s as %s: %w", ref, dst, err)
	}
	return nil
}

// put uploads the image's blobs (each in one request, as the distribution API allows with
// a digest) and then its manifest under tag: the whole push protocol the registry needs,
// without a registry client and its credential helpers.
func (r *Registry) put(ctx context.Context, repo, tag string, img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		err = r.do(ctx, http.MethodPost, "/v2/"+repo+"/blobs/uploads/?digest="+d.String(), "application/octet-stream", rc)
		_ = rc.Close()
		if err != nil {
			return err
		}
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	if err := r.do(ctx, http.MethodPost, "/v2/"+repo+"/blobs/uploads/?digest="+cfgName.String(), "application/octet-stream", bytes.NewReader(cfg)); err != nil {
		return err
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	return r.do(ctx, http.MethodPut, "/v2/"+repo+"/manifests/"+tag, string(mt), bytes.NewReader(manifest))
}

func (r *Registry) do(ctx context.Context, method, path, contentType string, body io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.Addr+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// HostsTOML is the containerd hosts.toml (in <config_path>/<host>/) that makes the registry
// at addr the only server of registry host: pulls and resolves go to
// http://<addr>/v2/<host>/<repository>/..., never to the registry itself.
func HostsTOML(host, addr string) (string, error) {
	if host == "" || strings.ContainsAny(host, "/\"\n") {
		return "", errors.New("hosts.toml: bad registry host " + host)
	}
	return fmt.Sprintf("server = %q\noverride_path = true\ncapabilities = [\"pull\", \"resolve\"]\n",
		"http://"+addr+"/v2/"+host), nil
}
