//! The driver's node-level calls, as kubelet's runtime health check and
//! image manager make them: Version and Status, and on the ImageService
//! ImageFsInfo, ListImages and ImageStatus.

use k8s_cri::v1 as cri;

use super::Driver;
use crate::cri::Result;

impl Driver {
    pub async fn version(&self) -> Result<cri::VersionResponse> {
        let d = self.timeout;
        self.call(
            "Version",
            None,
            None,
            d,
            0,
            cri::VersionRequest {
                version: "v1".into(),
            },
            |mut c, r| async move { c.version(r).await },
            |_, _, _| {},
        )
        .await
        .map_err(|o| Self::fail("Version", None, None, d, o))
    }

    /// Status (runtime conditions), as kubelet's runtime health check.
    pub async fn status(&self) -> Result<cri::StatusResponse> {
        let d = self.timeout;
        self.call(
            "Status",
            None,
            None,
            d,
            0,
            cri::StatusRequest { verbose: false },
            |mut c, r| async move { c.status(r).await },
            |_, _, _| {},
        )
        .await
        .map_err(|o| Self::fail("Status", None, None, d, o))
    }

    /// ImageFsInfo (ImageService), as kubelet's image GC and stats.
    pub async fn image_fs_info(&self) -> Result<cri::ImageFsInfoResponse> {
        let d = self.timeout;
        self.call_on(
            self.images.clone(),
            "ImageFsInfo",
            None,
            None,
            d,
            0,
            cri::ImageFsInfoRequest {},
            |mut c, r| async move { c.image_fs_info(r).await },
            |_, _, _| {},
        )
        .await
        .map_err(|o| Self::fail("ImageFsInfo", None, None, d, o))
    }

    /// ListImages (ImageService).
    pub async fn list_images(&self, filter: Option<cri::ImageFilter>) -> Result<Vec<cri::Image>> {
        let d = self.timeout;
        self.call_on(
            self.images.clone(),
            "ListImages",
            None,
            None,
            d,
            0,
            cri::ListImagesRequest { filter },
            |mut c, r| async move { c.list_images(r).await },
            |_, _, _| {},
        )
        .await
        .map(|r| r.images)
        .map_err(|o| Self::fail("ListImages", None, None, d, o))
    }

    /// ImageStatus (ImageService) of `image`; None if the runtime does not
    /// have it.
    pub async fn image_status(&self, image: &str) -> Result<Option<cri::Image>> {
        let d = self.timeout;
        let req = cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: image.to_owned(),
                ..Default::default()
            }),
            verbose: false,
        };
        self.call_on(
            self.images.clone(),
            "ImageStatus",
            None,
            None,
            d,
            0,
            req,
            |mut c, r| async move { c.image_status(r).await },
            |_, _, _| {},
        )
        .await
        .map(|r| r.image)
        .map_err(|o| Self::fail("ImageStatus", None, None, d, o))
    }
}
