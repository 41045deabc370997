// Package gathertest reads the archives of internal/gather back for tests, and looks for
// credentials that must not be in them.
package gathertest

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/octopus-mcs/octopus/internal/gather"
)

// ReadArchive returns the files of an archive by their path below its top directory.
func ReadArchive(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		_, name, ok := strings.Cut(hdr.Name, "/")
		if !ok {
			return nil, fmt.Errorf("%s: %s is not under the archive's top directory", path, hdr.Name)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, hdr.Name, err)
		}
		files[name] = string(b)
	}
}

// credentialField is a field or setting that names a credential, with its value.
var credentialField = regexp.MustCompile(`(?i)\b(token|private[_-]?key)["']?[ \t]*[:=][ \t]*["']?([^\s"',}]*)`)

// Leaks lists, sorted, every place in files where one of secrets appears, or where a token or
// private key field holds anything but gather.Redacted.
func Leaks(files map[string]string, secrets []string) []string {
	var leaks []string
	for name, content := range files {
		for _, s := range secrets {
			if s != "" && strings.Contains(content, s) {
				leaks = append(leaks, fmt.Sprintf("%s holds a secret (%.12s...)", name, s))
			}
		}
		for _, m := range credentialField.FindAllStringSubmatch(content, -1) {
			if m[2] != "" && m[2] != gather.Redacted {
				leaks = append(leaks, fmt.Sprintf("%s: %s", name, m[0]))
			}
		}
	}
	slices.Sort(leaks)
	return leaks
}
