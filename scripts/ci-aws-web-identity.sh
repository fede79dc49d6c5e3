# shellcheck shell=sh
# Sourced by the CI jobs (`. scripts/ci-aws-web-identity.sh`): AWS role assumption without a stored key.
# GitLab hands the job an OIDC token in a variable (`id_tokens: AWS_ID_TOKEN`, written by the pipelines in
# ci/gitlab); the AWS SDK reads a web-identity token from a file. When the CI/CD variable AWS_ROLE_ARN is set
# and the token is there, the token goes into a private temporary file named by AWS_WEB_IDENTITY_TOKEN_FILE,
# and boto3 assumes the role with it (AssumeRoleWithWebIdentity). Without AWS_ROLE_ARN nothing changes:
# static keys (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY variables) or the runner's own role are used.
if [ -n "${AWS_ROLE_ARN:-}" ] && [ -n "${AWS_ID_TOKEN:-}" ] && [ -z "${AWS_WEB_IDENTITY_TOKEN_FILE:-}" ]; then
  AWS_WEB_IDENTITY_TOKEN_FILE=$(mktemp)
  printf '%s' "$AWS_ID_TOKEN" >"$AWS_WEB_IDENTITY_TOKEN_FILE"
  export AWS_WEB_IDENTITY_TOKEN_FILE
  echo "ci: AWS credentials: assuming role $AWS_ROLE_ARN with the job's OIDC token" >&2
fi
