"""Load generator, metric definitions, Prometheus scrape, reports and plots."""
