"""Disaggregated prefill/decode on NVIDIA Dynamo: plan the pools, write the DynamoGraphDeployment, run the
topology here with the Dynamo mocker (stand-in for dynamo.trtllm), and read Dynamo's metrics.

Facts and their upstream sources: docs/dynamo.md.
"""
