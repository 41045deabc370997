package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// exportPollInterval is how often `export service` re-reads the ServiceExport while it waits
// for the agent's verdict: a CLI waiting a few seconds for one object, not a controller.
const exportPollInterval = 200 * time.Millisecond

// serviceFlags name one Service: NAME and -n, as kubectl does.
type serviceFlags struct {
	kube      kubeconfigFlags
	namespace string
	name      string
}

func (s *serviceFlags) addFlags(fs *pflag.FlagSet) {
	s.kube.addFlags(fs, "cluster the service is in")
	fs.StringVarP(&s.namespace, "namespace", "n", "", "namespace of the service (default: the kubeconfig context's, else default)")
}

// complete takes NAME from args and fills in the namespace from the kubeconfig when -n is absent.
func (s *serviceFlags) complete(args []string) error {
	if len(args) != 1 || args[0] == "" {
		return errors.New("expected exactly one argument: the name of the Service")
	}
	s.name = args[0]
	if s.namespace == "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = s.kube.path
		ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: s.kube.context}).Namespace()
		if err != nil {
			return fmt.Errorf("reading the namespace from the kubeconfig: %w (pass -n NAMESPACE)", err)
		}
		s.namespace = ns
	}
	return nil
}

func (s *serviceFlags) client() (client.Client, error) {
	c, _, err := s.kube.client()
	return c, err
}

type exportOptions struct {
	IOStreams
	svc    serviceFlags
	wait   time.Duration
	output outputFormat
}

func newExportCommand(streams IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "export", Short: "Export a resource to every cluster of the cluster set"}
	cmd.AddCommand(newExportServiceCommand(streams))
	return cmd
}

func newExportServiceCommand(streams IOStreams) *cobra.Command {
	o := &exportOptions{IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "service NAME",
		Short: "Export a Service: create its ServiceExport and report the agent's verdict",
		Long: `Creates the ServiceExport NAME (an existing one is kept), waits up to --wait for the
cluster's agent to set its conditions and prints them. Exits non-zero when the export is not
valid (no such Service, or an ExternalName one) or conflicts with the same service exported
from other clusters, with the condition's message; the export stays in place either way.

  octopus export service web -n shop --kubeconfig east.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: runE(o),
	}
	o.svc.addFlags(cmd.Flags())
	cmd.Flags().DurationVar(&o.wait, "wait", 15*time.Second, "how long to wait for the agent's verdict; 0 prints what is there at once")
	o.output.addFlag(cmd.Flags())
	return cmd
}

func (o *exportOptions) Complete(args []string) error { return o.svc.complete(args) }

func (o *exportOptions) Validate() error {
	if err := o.output.validate(); err != nil {
		return err
	}
	if o.wait < 0 {
		return fmt.Errorf("--wait %s: must not be negative", o.wait)
	}
	return nil
}

// exportResult is what `export service -o json` prints.
type exportResult struct {
	Namespace  string             `json:"namespace"`
	Name       string             `json:"name"`
	Created    bool               `json:"created"`
	Conditions []metav1.Condition `json:"conditions"`
}

func (o *exportOptions) Run(ctx context.Context) error {
	c, err := o.svc.client()
	if err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: o.svc.namespace, Name: o.svc.name}
	res := exportResult{Namespace: key.Namespace, Name: key.Name, Created: true}
	se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	switch err := c.Create(ctx, se); {
	case apierrors.IsAlreadyExists(err):
		res.Created = false
	case meta.IsNoMatchError(err):
		return fmt.Errorf("the cluster has no ServiceExport API: join it first with `octopus join BROKER-INFO --cluster-id ID`: %w", err)
	case err != nil:
		return fmt.Errorf("creating ServiceExport %s: %w", key, err)
	}

	verdict, err := waitExportVerdict(ctx, c, key, o.wait, se)
	if err != nil {
		return err
	}
	res.Conditions = se.Status.Conditions
	if o.output == outputJSON {
		enc := json.NewEncoder(o.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else if err := renderExport(o.Out, res); err != nil {
		return err
	}
	return verdict
}

// waitExportVerdict re-reads the export into se until the agent has decided (valid or not,
// and for a valid one, exported and judged for conflicts) or wait passes. It returns the
// verdict as an error for an invalid or conflicting export, or one that nobody decided on; the
// second result is for failures to read.
func waitExportVerdict(ctx context.Context, c client.Client, key client.ObjectKey, wait time.Duration, se *mcsv1beta1.ServiceExport) (verdict, err error) {
	deadline := time.Now().Add(wait)
	for {
		if err := c.Get(ctx, key, se); err != nil {
			return nil, fmt.Errorf("reading ServiceExport %s: %w", key, err)
		}
		decided, v := exportVerdict(se)
		if decided || !time.Now().Before(deadline) {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the conditions of ServiceExport %s: %w", key, context.Cause(ctx))
		case <-time.After(exportPollInterval):
		}
	}
}

// exportVerdict judges the conditions of se: decided once Valid is False, or Valid, Ready and
// Conflict are all there; the error describes what is wrong for the user.
func exportVerdict(se *mcsv1beta1.ServiceExport) (decided bool, verdict error) {
	conds := se.Status.Conditions
	valid := meta.FindStatusCondition(conds, string(mcsv1beta1.ServiceExportConditionValid))
	ready := meta.FindStatusCondition(conds, string(mcsv1beta1.ServiceExportConditionReady))
	conflict := meta.FindStatusCondition(conds, string(mcsv1beta1.ServiceExportConditionConflict))
	key := se.Namespace + "/" + se.Name
	switch {
	case valid == nil:
		return false, fmt.Errorf("ServiceExport %s was not processed yet: check that the cluster has joined and its agent runs (`octopus show clusters`)", key)
	case valid.Status == metav1.ConditionFalse:
		return true, fmt.Errorf("ServiceExport %s is not valid (%s): %s", key, valid.Reason, valid.Message)
	case conflict != nil && conflict.Status == metav1.ConditionTrue:
		return ready != nil, fmt.Errorf("ServiceExport %s conflicts with other clusters' exports (%s): %s", key, conflict.Reason, conflict.Message)
	case ready == nil || ready.Status != metav1.ConditionTrue:
		msg := "no Ready condition yet"
		if ready != nil {
			msg = ready.Reason + ": " + ready.Message
		}
		return false, fmt.Errorf("ServiceExport %s is valid but not exported yet (%s)", key, msg)
	case conflict == nil:
		return false, nil // exported; the conflict check follows
	default:
		return true, nil
	}
}

func renderExport(w io.Writer, res exportResult) error {
	verb := "Created"
	if !res.Created {
		verb = "Kept the existing"
	}
	fmt.Fprintf(w, "%s ServiceExport %s/%s.\n", verb, res.Namespace, res.Name)
	if len(res.Conditions) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONDITION\tSTATUS\tREASON\tMESSAGE")
	for _, c := range res.Conditions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	return tw.Flush()
}
