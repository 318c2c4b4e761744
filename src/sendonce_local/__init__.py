"""sendonce on one machine: moto, the local Resend server, the event-source poller, fault
injection, the local HTTP API server, the local deploy and the demo. Never shipped to Lambda."""
