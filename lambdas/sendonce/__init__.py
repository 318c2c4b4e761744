"""sendonce: campaign email delivery that sends each recipient once."""
